// Types for @hymical/transport-plugin. index.js says what each does.

export interface Endpoint {
  url: string;
  config: Record<string, string>;
}

export interface Header {
  name: string;
  value: string;
}

export interface Message {
  deliveryId: string;
  attempt: number;
  endpoint: Endpoint;
  /** Carried exactly, in order. They hold the signature: never log them. */
  headers: Header[];
  /** The exact signed bytes. */
  body: Buffer;
  deadline: Date | null;
  traceparent: string;
  tracestate: string;
}

export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export interface Outcome {
  kind: 'delivered' | 'retryable' | 'permanent';
  statusCode?: number;
  error?: string;
  retryAfterMs?: number;
  noRequest?: boolean;
}

export interface Plugin {
  name: string;
  send(message: Message, ctx: { signal: AbortSignal; log: Logger }): Promise<Outcome> | Outcome;
  validate?(endpoint: Endpoint, ctx: { log: Logger }): Promise<void> | void;
  configure?(settings: Record<string, string>, ctx: { log: Logger }): Promise<void> | void;
  onStop?(): void;
}

export function serve(plugin: Plugin): Promise<unknown>;
export function delivered(statusCode?: number): Outcome;
export function retryable(statusCode: number, reason: string, retryAfterMs?: number): Outcome;
export function permanent(statusCode: number, reason: string): Outcome;
export function refused(reason: string): Outcome;
export function deferred(reason: string): Outcome;
export function boundError(text: unknown): string;
export const MAX_ERROR_BYTES: number;
export const PROTOCOL_VERSIONS: number[];
export const MAGIC_COOKIE: { key: string; value: string };
