// A client generated from /v1/openapi.json by openapi-typescript, used
// through openapi-fetch: it creates endpoints (once per Idempotency-Key),
// submits a form, pages the endpoint list and deletes its endpoint.
// TestOpenAPIGeneratedClient type-checks it (tsc --strict) against the
// generated schema.d.ts, runs it against a real server and checks the
// server's store afterwards. It prints one JSON line of what it got.
import createClient from "openapi-fetch";
import type { paths } from "./schema.js";

// Node's process, declared here so no @types/node is needed.
declare const process: { env: Record<string, string | undefined> };

const baseUrl = process.env.HYMICAL_URL!;
const admin = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${process.env.HYMICAL_ADMIN_TOKEN}` } });
const ingest = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${process.env.HYMICAL_INGEST_KEY}` } });

function fail(what: string, detail: unknown): never {
  throw new Error(`${what}: ${JSON.stringify(detail)}`);
}

const created = await admin.POST("/v1/endpoints", {
  body: { url: process.env.HYMICAL_RECEIVER!, form_ids: ["contact"], description: "from the generated client", rate_limit: 10 },
});
if (created.response.status !== 201 || !created.data) fail("create", created.error);
const endpoint = created.data;
const secret: string = endpoint.secret;

const submit = () =>
  ingest.POST("/v1/forms/{form_id}/submissions", {
    params: { path: { form_id: "contact" }, header: { "Idempotency-Key": "ts-client-1" } },
    body: { email: "a@example.com", message: "Hello" },
  });
const first = await submit();
if (first.response.status !== 202 || !first.data) fail("submit", first.error);
const again = await submit();
if (again.response.status !== 200 || again.response.headers.get("Idempotent-Replayed") !== "true") fail("repeat", again.error);

const missing = await admin.GET("/v1/endpoints/{id}", { params: { path: { id: "ep_missing" } } });
if (missing.response.status !== 404 || !missing.error) fail("missing", missing.data);
const code: string = missing.error.error.code;

const list = await admin.GET("/v1/deliveries", { params: { query: { form_id: "contact", limit: 10 } } });
if (!list.data) fail("list", list.error);
const states = list.data.deliveries.map((d) => d.state);

// A second endpoint, created once however often its key is sent.
const other = { url: process.env.HYMICAL_RECEIVER!, form_ids: ["other"] };
const keyed = await admin.POST("/v1/endpoints", { params: { header: { "Idempotency-Key": "ts-endpoint-1" } }, body: other });
if (keyed.response.status !== 201 || !keyed.data) fail("keyed create", keyed.error);
const rekeyed = await admin.POST("/v1/endpoints", { params: { header: { "Idempotency-Key": "ts-endpoint-1" } }, body: other });
if (rekeyed.response.status !== 200 || rekeyed.data?.id !== keyed.data.id || rekeyed.response.headers.get("Idempotent-Replayed") !== "true") {
  fail("keyed repeat", rekeyed.error ?? rekeyed.data);
}

// Every endpoint, one page at a time, newest first.
const paged: string[] = [];
let cursor: string | undefined;
for (let pages = 0; ; pages++) {
  if (pages > 10) fail("paging", paged);
  const page = await admin.GET("/v1/endpoints", { params: { query: { limit: 1, cursor } } });
  if (!page.data) fail("page", page.error);
  paged.push(...page.data.endpoints.map((e) => e.id));
  const next: string | null = page.data.next_cursor;
  if (next === null) break;
  cursor = next;
}

// Its delivery is pending, so a plain delete is refused; force fails it.
const busy = await admin.DELETE("/v1/endpoints/{id}", { params: { path: { id: endpoint.id } } });
if (busy.response.status !== 409 || !busy.error) fail("busy delete", busy.data);
const deleted = await admin.DELETE("/v1/endpoints/{id}", { params: { path: { id: endpoint.id }, query: { force: true } } });
if (deleted.response.status !== 200 || !deleted.data) fail("delete", deleted.error);
const failedPending: number = deleted.data.failed_pending;
const gone = await admin.GET("/v1/endpoints/{id}", { params: { path: { id: endpoint.id } } });
if (gone.response.status !== 410 || !gone.error) fail("gone", gone.data);

console.log(JSON.stringify({
  endpoint_id: endpoint.id,
  secret_prefix: secret.slice(0, 6),
  submission_id: first.data.submission_id,
  deliveries: first.data.deliveries,
  missing_code: code,
  states,
  keyed_id: keyed.data.id,
  paged,
  busy_code: busy.error.error.code,
  deleted_at: deleted.data.deleted_at,
  failed_pending: failedPending,
  gone_code: gone.error.error.code,
}));
