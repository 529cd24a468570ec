/// <reference types="node" />
// Types of @hymical/webhook (index.js). See docs/receiving-node.md.

/** The three headers of a signed message. */
export const HEADER_ID: 'webhook-id';
export const HEADER_TIMESTAMP: 'webhook-timestamp';
export const HEADER_SIGNATURE: 'webhook-signature';
/** Seconds a timestamp may lie in the past or the future by default: 300. */
export const DEFAULT_TOLERANCE_SECONDS: number;
export const EVENT_SUBMISSION_RECEIVED: 'submission.received';
/** Longest dedupe id accepted, in UTF-8 bytes: 255. */
export const MAX_ID_BYTES: number;

export type WebhookErrorCode =
  | 'INVALID_KEY'
  | 'MISSING_HEADER'
  | 'MALFORMED_TIMESTAMP'
  | 'TIMESTAMP_TOO_OLD'
  | 'TIMESTAMP_TOO_NEW'
  | 'NO_MATCHING_SIGNATURE'
  | 'INVALID_EVENT';

/** Every error of this package; its message never holds a key or an expected signature. */
export class WebhookError extends Error {
  name: 'WebhookError';
  code: WebhookErrorCode;
  /** 401 for a failed verification, 400 for INVALID_EVENT; absent for INVALID_KEY. */
  status?: 400 | 401;
  /** The missing header, for MISSING_HEADER. */
  header?: 'webhook-id' | 'webhook-timestamp' | 'webhook-signature';
}

/** req.headers or req.headersDistinct, a fetch Headers, a Map, or a plain object in any case. */
export type HeadersLike =
  | Record<string, string | string[] | undefined>
  | Headers
  | Map<string, string | string[]>;

/** The raw request body: never a parsed object. */
export type RawBody = Buffer | Uint8Array | ArrayBuffer | string;

export interface SignedMessage {
  /** webhook-id: the delivery's id, the same on every attempt of one delivery, different for each endpoint. */
  messageId: string;
  /** webhook-timestamp: when this attempt was signed. */
  timestamp: Date;
  /** The raw body, exactly as verified. */
  body: Buffer;
}

export interface VerifiedMessage<E = any> extends SignedMessage {
  /** The body parsed as JSON. */
  event: E;
  /** event.type, e.g. "submission.received"; "" when the event has none. */
  type: string;
  /** event.submission.id of a submission event, the dedupe key; undefined for other types. */
  submissionId: string | undefined;
}

export interface VerifierOptions {
  /** Seconds the timestamp may lie in the past or the future; default 300. */
  tolerance?: number;
  /** The clock in milliseconds; default Date.now. */
  now?: () => number;
}

export class Verifier {
  /** whsec_ secrets (or bare base64) and whpk_ public keys, mixed as needed; throws WebhookError INVALID_KEY. */
  constructor(keys: string | string[], options?: VerifierOptions);
  /** Verifies, then parses the body as a Hymical event. */
  verify<E = any>(headers: HeadersLike, body: RawBody): VerifiedMessage<E>;
  /** Verifies the signature and the timestamp only. */
  verifySignature(headers: HeadersLike, body: RawBody): SignedMessage;
  toString(): string;
}

export interface DedupeStore {
  seen(id: string): boolean | Promise<boolean>;
  remember(id: string): void | Promise<void>;
}

export interface MemoryStoreOptions {
  /** Most ids remembered, the oldest forgotten first; default 100000. */
  maxIds?: number;
  /** Forget an id this long after it was recorded; 0 (default) never. */
  ttlMs?: number;
  now?: () => number;
}

export function memoryStore(options?: MemoryStoreOptions): DedupeStore & { size(): number };

export interface Dedupe {
  process<T>(id: string, fn: () => T | Promise<T>): Promise<{ duplicate: true } | { duplicate: false; result: Awaited<T> }>;
}

export function createDedupe(store?: DedupeStore): Dedupe;

export interface ReceiveResult<E = any> {
  /** 204 processed or not a submission, 200 already processed, 400, 401, 500. */
  status: 200 | 204 | 400 | 401 | 500;
  /** A short text for the response body: the class of problem, no detail. */
  reason: string;
  message?: VerifiedMessage<E>;
  duplicate?: boolean;
  /** The verification error, or what onSubmission threw (for your log, not the response). */
  error?: unknown;
}

export function receive<E = any>(args: {
  verifier: Verifier;
  dedupe: Dedupe;
  headers: HeadersLike;
  body: RawBody;
  onSubmission: (message: VerifiedMessage<E>) => unknown;
}): Promise<ReceiveResult<E>>;
