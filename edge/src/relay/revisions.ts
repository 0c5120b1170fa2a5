/**
 * The MCP protocol revisions /mcp serves and how a POST picks one (src/relay/mcp.ts answers it).
 *
 * Two eras (specification 2026-07-28, basic/versioning.mdx, "Terminology"):
 * - the handshake revisions, 2024-11-05 to 2025-11-25: `initialize` names the revision; later
 *   requests carry it (from 2025-06-18) in the `MCP-Protocol-Version` header, or no header (the
 *   transport page lets a server read that as 2025-03-26);
 * - 2026-07-28, stateless: no `initialize`, every request carries its revision, client
 *   capabilities and (optionally) client info in `params._meta`, plus the routing headers
 *   `MCP-Protocol-Version`, `Mcp-Method` and, for tools/call, `Mcp-Name` (basic/transports/
 *   streamable-http.mdx, "Request Metadata"), which a server that reads the body must check
 *   against it: a mismatch is 400 with `HeaderMismatch` (-32020).
 *
 * The era of a POST: a header naming a revision outside the handshake ones is the 2026 era (the
 * rule of the `mcp` SDK's session manager); a body carrying the reserved `_meta` version key
 * under no header or a handshake one is a client contradicting itself (HeaderMismatch); anything
 * else is the handshake era, served exactly as before 2026-07-28 was added.
 */

/** The revisions reachable through `initialize`, oldest first (the last is offered by default). */
export const HANDSHAKE_VERSIONS: readonly string[] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/** The stateless revisions: each request names its own in `_meta` (server/discover lists them). */
export const MODERN_VERSIONS: readonly string[] = ["2026-07-28"];
/** What an UnsupportedProtocolVersionError names, newest first: every revision served, of both
 * eras, as the specification's example of a dual-era server does (basic/versioning.mdx), so a
 * client that speaks only older ones learns it can use `initialize`. */
export const SUPPORTED_VERSIONS: readonly string[] = [...HANDSHAKE_VERSIONS, ...MODERN_VERSIONS].reverse();

/** The reserved `_meta` keys of 2026-07-28 (basic/index.mdx, "Per-request protocol fields"). */
export const META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion";
export const META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities";
export const META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo";
export const META_SERVER_INFO = "io.modelcontextprotocol/serverInfo";

// JSON-RPC 2.0 error codes, and the ones MCP defines in -32020..-32099 (basic/index.mdx).
export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;
export const HEADER_MISMATCH = -32020;
export const UNSUPPORTED_PROTOCOL_VERSION = -32022;

/** The HTTP status of a 2026-07-28 error answer: 404 for an unknown method, 400 for the rest of
 * these (streamable-http.mdx, "Protocol Version Header" and "Server Validation"; basic/index.mdx
 * for -32602). Other codes are never produced on this path. */
export function modernErrorStatus(code: number): number {
  return code === METHOD_NOT_FOUND ? 404 : 400;
}

/** The params key whose value `Mcp-Name` mirrors, per method (streamable-http.mdx, "Standard
 * Request Headers"); only tools/call is served here, the others are checked all the same. */
const NAME_BEARING: Readonly<Record<string, string>> = { "tools/call": "name", "prompts/get": "name", "resources/read": "uri" };

export interface Rejection {
  code: number;
  message: string;
  data?: unknown;
}

/** What a 2026-07-28 request that passed every check declared about itself. */
export interface ModernRequest {
  version: string;
  clientInfo: Record<string, unknown> | null;
  clientCapabilities: Record<string, unknown>;
}

/** Which era serves a POST, from its headers and body (the module comment). */
export type Era = { era: "handshake" } | { era: "modern" } | { era: "contradiction"; rejection: Rejection };

export function eraOf(headers: Headers, body: Record<string, unknown>): Era {
  const header = headers.get("MCP-Protocol-Version");
  if (header !== null && !HANDSHAKE_VERSIONS.includes(header)) return { era: "modern" };
  const meta = metaOf(body);
  if (meta !== null && META_PROTOCOL_VERSION in meta) {
    return {
      era: "contradiction",
      rejection: {
        code: HEADER_MISMATCH,
        message:
          header === null
            ? `the MCP-Protocol-Version header is missing; it must repeat _meta's ${META_PROTOCOL_VERSION}`
            : `the MCP-Protocol-Version header (${header}) does not match _meta's ${META_PROTOCOL_VERSION}`,
      },
    };
  }
  return { era: "handshake" };
}

/** The UnsupportedProtocolVersionError of `requested`, or null when it is a stateless revision
 * served here (its `data` is the specification's `{supported, requested}`). */
export function unsupportedVersion(requested: string): Rejection | null {
  if (MODERN_VERSIONS.includes(requested)) return null;
  return {
    code: UNSUPPORTED_PROTOCOL_VERSION,
    message: `Unsupported protocol version ${JSON.stringify(requested)}; this server speaks ${SUPPORTED_VERSIONS.join(", ")} (2026-07-28 with _meta on each request, the others through initialize)`,
    data: { supported: SUPPORTED_VERSIONS, requested },
  };
}

/**
 * The checks of a 2026-07-28 request, first failure wins, in the order of the `mcp` SDK's own
 * server (mcp/shared/inbound.py, `classify_inbound_request`), so a client is told the same thing
 * by both: the `_meta` envelope (-32602), the routing headers against the body (-32020), then the
 * revision (-32022). One difference: a POST with neither envelope nor a known revision in its
 * header is told the revision is unsupported, naming the ones served, rather than that `_meta` is
 * missing (the specification asks servers to name their revisions to such clients).
 */
export function checkModernRequest(headers: Headers, method: string, params: Record<string, unknown>): ModernRequest | Rejection {
  const header = headers.get("MCP-Protocol-Version");
  const meta = metaOf({ params });
  if (meta === null || !(META_PROTOCOL_VERSION in meta) || !(META_CLIENT_CAPABILITIES in meta)) {
    if (header !== null && meta === null && !MODERN_VERSIONS.includes(header)) {
      return unsupportedVersion(header) as Rejection;
    }
    const missing = [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES].filter((key) => meta === null || !(key in meta));
    return {
      code: INVALID_PARAMS,
      message: `params._meta must carry ${missing.join(" and ")} (MCP 2026-07-28 sends them with every request)`,
    };
  }
  const version = meta[META_PROTOCOL_VERSION];
  if (header === null || header !== version) {
    return { code: HEADER_MISMATCH, message: `the MCP-Protocol-Version header does not match _meta's ${META_PROTOCOL_VERSION}` };
  }
  if (headers.get("Mcp-Method") !== method) {
    return { code: HEADER_MISMATCH, message: `the Mcp-Method header does not match the request's method ${JSON.stringify(method)}` };
  }
  const nameKey = NAME_BEARING[method];
  if (nameKey !== undefined) {
    const sent = headers.get("Mcp-Name");
    const value = params[nameKey];
    if (!(sent === null && value === undefined) && decodeHeaderValue(sent) !== value) {
      return { code: HEADER_MISMATCH, message: `the Mcp-Name header does not match params.${nameKey}` };
    }
  }
  if (typeof version !== "string") {
    return { code: INVALID_PARAMS, message: `_meta's ${META_PROTOCOL_VERSION} must be a string` };
  }
  const unsupported = unsupportedVersion(version);
  if (unsupported !== null) return unsupported;
  const capabilities = meta[META_CLIENT_CAPABILITIES];
  if (!isObject(capabilities)) {
    return { code: INVALID_PARAMS, message: `_meta's ${META_CLIENT_CAPABILITIES} must be an object` };
  }
  const clientInfo = meta[META_CLIENT_INFO];
  if (clientInfo !== undefined && !isObject(clientInfo)) {
    return { code: INVALID_PARAMS, message: `_meta's ${META_CLIENT_INFO} must be an object when present` };
  }
  return { version, clientInfo: clientInfo ?? null, clientCapabilities: capabilities };
}

const SENTINEL = /^=\?base64\?(.*)\?=$/s;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * A header value as the client meant it: verbatim, or the UTF-8 text of a `=?base64?...?=`
 * sentinel (streamable-http.mdx, "Value Encoding"). A malformed sentinel (not canonical base64,
 * not UTF-8) is null, so it matches no body value.
 */
export function decodeHeaderValue(value: string | null): string | null {
  if (value === null) return null;
  const sentinel = SENTINEL.exec(value);
  if (sentinel === null) return value;
  const payload = sentinel[1] ?? "";
  if (!BASE64.test(payload)) return null;
  const binary = atob(payload);
  if (btoa(binary) !== payload) return null; // nonzero padding bits: not what an encoder writes
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(Uint8Array.from(binary, (char) => char.charCodeAt(0)));
  } catch {
    return null;
  }
}

function metaOf(body: Record<string, unknown>): Record<string, unknown> | null {
  const params = body["params"];
  if (!isObject(params)) return null;
  const meta = params["_meta"];
  return isObject(meta) ? meta : null;
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
