/**
 * The Worker's outbound fetches (edge/README.md, "Decisions": client metadata documents). The
 * only URLs the Edge fetches are client ID metadata documents: an https client_id names one, and
 * the OAuth library fetches it with the global `fetch` (workers-oauth-provider 1.2.3,
 * fetchCimdOrigin, redirects followed by default). Whoever calls GET /authorize chooses that URL,
 * so every outbound fetch goes through `guardedFetch` below:
 * - the URL is parsed with the WHATWG parser (workerd's: it turns 2130706433, 0x7f000001,
 *   0177.0.0.1, 127.1, %31%32%37.0.0.1 and full-width digits into 127.0.0.1, lowercases, and
 *   refuses IPv6 zone ids), then its host is classified: only a public name or a public unicast
 *   address, over https on port 443, without userinfo, is fetched;
 * - redirects are followed by hand, at most MAX_REDIRECTS, each target classified the same way
 *   before it is fetched.
 * What this cannot see: a public name whose DNS answer is a private address (the Worker resolves
 * no names itself; edge/README.md says what covers that on Cloudflare).
 *
 * Test configuration only: with EDGE_TEST_ROUTES=1, EDGE_TEST_CIMD_ORIGINS (comma-separated
 * origins, e.g. `https://127.0.0.1:4443`, set by the tests through extra_vars, never by
 * wrangler.jsonc) are fetched although loopback: the tests' own document servers.
 */

import { env as workerEnv } from "cloudflare:workers";
import type { Env } from "./env.js";

/** The stable code of a refused client metadata document URL (our consent page, the registry). */
export const METADATA_URL_REFUSED = "invalid_client_metadata_url";
/** The start of a refused fetch's message: the library keeps only an error's message
 * (CimdFetchError.detail), so the consent page recognises a refusal by it. */
export const REFUSED_FETCH_PREFIX = "outbound fetch refused: ";
const MAX_REDIRECTS = 3;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

/** A fetch the guard refused before anything was sent. */
export class RefusedFetch extends Error {
  constructor(
    readonly url: string,
    readonly reason: string,
  ) {
    super(`${REFUSED_FETCH_PREFIX}${reason}`);
    this.name = "RefusedFetch";
  }
}

/** The origins the test configuration allows although they are loopback (see the top). */
export function allowedTestOrigins(env: Partial<Env> = workerEnv as unknown as Partial<Env>): ReadonlySet<string> {
  if (env.EDGE_TEST_ROUTES !== "1" || !env.EDGE_TEST_CIMD_ORIGINS) return new Set();
  return new Set(env.EDGE_TEST_CIMD_ORIGINS.split(",").map((origin) => origin.trim()).filter((origin) => origin !== ""));
}

/** Why `raw` is not fetched, or null when it may be: a host that is a public name or a public
 * unicast address (checked first, so any spelling of a private host says so), https, port 443,
 * no userinfo; or an origin the tests allow. */
export function outboundRefusal(raw: string, allowed: ReadonlySet<string> = allowedTestOrigins()): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "not a valid URL (an IPv6 zone id, a space or a bad escape in the host)";
  }
  if (allowed.has(url.origin)) return null;
  const hostRefusal = hostClass(url.hostname);
  if (hostRefusal !== null) return `${url.hostname} is ${hostRefusal}`;
  if (url.protocol !== "https:") return `only https is fetched, not ${url.protocol.slice(0, -1)}`;
  if (url.port !== "") return `only port 443 is fetched, not ${url.port}`;
  if (url.username !== "" || url.password !== "") return "a URL with a user name or password is never fetched";
  return null;
}

/** Why the host `host` (as the WHATWG parser serialises it) is not public, or null. */
function hostClass(host: string): string | null {
  if (host.startsWith("[")) return ipv6Refusal(parseIpv6(host.slice(1, -1)));
  const octets = parseIpv4(host);
  return octets !== null ? ipv4Refusal(octets) : nameRefusal(host.replace(/\.+$/, ""));
}

/** Install the guard as the Worker's global fetch (once per isolate). */
export function installOutboundGuard(): void {
  const plain = globalThis.fetch;
  if ((plain as { guarded?: boolean }).guarded === true) return;
  const guarded = (input: RequestInfo | URL, init?: RequestInit): Promise<Response> =>
    guardedFetch(plain, new Request(input, init));
  Object.assign(guarded, { guarded: true });
  globalThis.fetch = guarded as typeof fetch;
}

async function guardedFetch(plain: typeof fetch, first: Request): Promise<Response> {
  const follow = first.redirect === "follow" && (first.method === "GET" || first.method === "HEAD");
  let request = first;
  for (let hop = 0; ; hop += 1) {
    const refusal = outboundRefusal(request.url);
    if (refusal !== null) throw new RefusedFetch(request.url, hop === 0 ? refusal : `a redirect led to ${refusal}`);
    const response = await plain(request, { redirect: "manual" });
    const location = response.headers.get("Location");
    if (!follow || !REDIRECT_STATUSES.has(response.status) || location === null) return response;
    await response.body?.cancel();
    if (hop >= MAX_REDIRECTS) throw new RefusedFetch(request.url, `more than ${MAX_REDIRECTS} redirects`);
    let next: string;
    try {
      next = new URL(location, request.url).href;
    } catch {
      throw new RefusedFetch(request.url, "a redirect to an invalid URL");
    }
    request = new Request(next, request);
  }
}

/** Special-use and private names (RFC 6761 localhost, RFC 6762 local, RFC 8375 home.arpa,
 * ICANN's private-use internal, the common localdomain) and single-label names, which no public
 * client metadata document has (`metadata` is a cloud metadata server's short name). */
const PRIVATE_SUFFIXES = ["localhost", "local", "internal", "home.arpa", "localdomain"];

function nameRefusal(name: string): string | null {
  if (name === "") return "an empty host";
  if (!name.includes(".")) return "a single-label name (never a public host)";
  const suffix = PRIVATE_SUFFIXES.find((candidate) => name === candidate || name.endsWith(`.${candidate}`));
  return suffix === undefined ? null : `a name under .${suffix} (never a public host)`;
}

/** A dotted IPv4 address as the WHATWG parser serialises every IPv4 spelling, else null. */
function parseIpv4(host: string): number[] | null {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  if (match === null) return null;
  const octets = match.slice(1).map(Number);
  return octets.every((octet) => octet <= 255) ? octets : null;
}

/** IPv4 blocks that are not public unicast (IANA special-purpose registry). */
const IPV4_BLOCKS: [string, number, string][] = [
  ["0.0.0.0", 8, "this-network (0.0.0.0 reaches the local host)"],
  ["10.0.0.0", 8, "private (RFC 1918)"],
  ["100.64.0.0", 10, "shared CGNAT space (RFC 6598)"],
  ["127.0.0.0", 8, "loopback"],
  ["169.254.0.0", 16, "link-local (cloud metadata servers live at 169.254.169.254)"],
  ["172.16.0.0", 12, "private (RFC 1918)"],
  ["192.0.0.0", 24, "IETF protocol assignments"],
  ["192.0.2.0", 24, "documentation"],
  ["192.88.99.0", 24, "6to4 relay anycast"],
  ["192.168.0.0", 16, "private (RFC 1918)"],
  ["198.18.0.0", 15, "benchmarking"],
  ["198.51.100.0", 24, "documentation"],
  ["203.0.113.0", 24, "documentation"],
  ["224.0.0.0", 4, "multicast"],
  ["240.0.0.0", 4, "reserved (and broadcast)"],
];

function ipv4Value(octets: number[]): number {
  return octets.reduce((value, octet) => value * 256 + octet, 0);
}

function ipv4Refusal(octets: number[]): string | null {
  const value = ipv4Value(octets);
  for (const [base, bits, what] of IPV4_BLOCKS) {
    const size = 2 ** (32 - bits);
    const start = ipv4Value(base.split(".").map(Number));
    if (value >= start && value < start + size) return what;
  }
  return null;
}

/** The eight 16-bit groups of an IPv6 address as the WHATWG parser serialises it (hex groups,
 * at most one `::`, no dotted tail). */
function parseIpv6(text: string): number[] {
  const [head = "", tail] = text.split("::");
  const groups = (part: string): number[] => (part === "" ? [] : part.split(":").map((group) => parseInt(group, 16)));
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  return [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
}

function embeddedIpv4(groups: number[], at: number): string {
  const high = groups[at] ?? 0;
  const low = groups[at + 1] ?? 0;
  return [high >> 8, high & 255, low >> 8, low & 255].join(".");
}

/** Only global unicast (2000::/3) outside its special blocks is public; an IPv4 address written
 * as IPv6 (mapped, compatible, NAT64, 6to4, Teredo) is never fetched in that spelling. */
function ipv6Refusal(groups: number[]): string | null {
  const [g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0, , g7 = 0] = groups;
  const zeroThrough = (count: number): boolean => groups.slice(0, count).every((group) => group === 0);
  if (zeroThrough(8)) return "the unspecified address (reaches the local host)";
  if (zeroThrough(7) && g7 === 1) return "loopback";
  if (zeroThrough(5) && g5 === 0xffff) return `IPv4-mapped (${embeddedIpv4(groups, 6)})`;
  if (zeroThrough(6)) return `IPv4-compatible (${embeddedIpv4(groups, 6)})`;
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0) {
    return `NAT64 (${embeddedIpv4(groups, 6)})`;
  }
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 1) return "local-use NAT64";
  if ((g0 & 0xfe00) === 0xfc00) return "unique-local (fc00::/7; fd00:ec2::254 is a cloud metadata server)";
  if ((g0 & 0xffc0) === 0xfe80) return "link-local (fe80::/10)";
  if ((g0 & 0xffc0) === 0xfec0) return "site-local (fec0::/10)";
  if ((g0 & 0xff00) === 0xff00) return "multicast";
  if (g0 === 0x2001 && g1 === 0) return "Teredo (2001::/32)";
  if (g0 === 0x2001 && g1 < 0x200) return "IETF protocol assignments (2001::/23)";
  if (g0 === 0x2001 && g1 === 0xdb8) return "documentation";
  if (g0 === 0x2002) return `6to4 (${embeddedIpv4(groups, 1)})`;
  if (g0 === 0x3fff && (g1 & 0xf000) === 0) return "documentation (3fff::/20)";
  if ((g0 & 0xe000) !== 0x2000) return "not global unicast (outside 2000::/3)";
  return null;
}
