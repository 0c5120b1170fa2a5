/**
 * The contract identity rule of src/herdr_mcp/contract/__init__.py `identity_of`, in TypeScript:
 * `hash = "sha256:" + hex(sha256(JCS(tools sorted by name)))`, JCS being RFC 8785.
 *
 * RFC 8785 serialises strings and numbers exactly as ECMAScript's JSON.stringify does and sorts
 * object keys by UTF-16 code units, which is JavaScript's default string order; so canonical JSON
 * here is JSON.stringify with sorted keys. The catalogs hold no non-finite numbers.
 */

export interface ContractIdentity {
  epoch: number;
  hash: string;
  tool_count: number;
}

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** RFC 8785 canonical JSON text of `value`. */
export function canonicalJson(value: Json): string {
  if (value === null || typeof value !== "object") {
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    return `[${value.map(canonicalJson).join(",")}]`;
  }
  const keys = Object.keys(value).sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key] as Json)}`).join(",")}}`;
}

/** The identity of a tool array exactly as served (order does not matter). */
export async function identityOf(
  tools: readonly { name: string }[],
  epoch: number,
): Promise<ContractIdentity> {
  const ordered = [...tools].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const bytes = new TextEncoder().encode(canonicalJson(ordered as unknown as Json));
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  const hex = Array.from(digest, (byte) => byte.toString(16).padStart(2, "0")).join("");
  return { epoch, hash: `sha256:${hex}`, tool_count: tools.length };
}
