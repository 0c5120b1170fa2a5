/**
 * The frozen catalogs the Edge knows, bundled into the Worker at build time from
 * manifests/contracts/ (the same files the Python package freezes; never fetched at run time).
 *
 * The contract rule (docs/edge-protocol.md, "The runtime identity and the public contract"):
 * /mcp tools/list always serves exactly manifests/contracts/edge-epoch-8.json (19 tools), whatever
 * a device announces and whether it is online, so a connector's tool list never drifts with the
 * workstation. A runtime tool is relayed only to a device whose announced runtime identity is the
 * one edge epoch 8 is built from (runtime epoch 5: epoch, hash and tool count); any other identity,
 * the rollback baseline (runtime epoch 4) included, is refused `contract_mismatch`.
 */
import edgeEpoch8 from "../../../manifests/contracts/edge-epoch-8.json";
import runtimeEpoch5 from "../../../manifests/contracts/runtime-epoch-5.json";
import type { AnnouncedContract } from "../relay_stub.js";
import { type ContractIdentity, type Json, identityOf } from "./identity.js";

export interface Tool {
  name: string;
  description: string;
  inputSchema: { [key: string]: Json };
  annotations?: { [key: string]: Json };
}

interface CatalogFile {
  epoch: number;
  tools: Tool[];
}

/** The public Edge contract: what /mcp tools/list serves, always. */
export const EDGE_TOOLS: readonly Tool[] = (edgeEpoch8 as CatalogFile).tools;

// MCP 2026-07-28 lets a tool's input schema mark parameters (`x-mcp-header`) that clients then
// mirror into `Mcp-Param-*` headers, which a server must check against the body. /mcp checks
// only the standard routing headers (src/relay/revisions.ts), so the catalog it serves must mark
// none: a catalog that does fails here, at load, before a client could rely on it.
if (EDGE_TOOLS.some((tool) => JSON.stringify(tool.inputSchema).includes('"x-mcp-header"'))) {
  throw new Error("edge-epoch-8.json marks x-mcp-header parameters, whose Mcp-Param-* headers /mcp does not check");
}

/** The edge-local tool, as frozen in edge-epoch-8.json. */
export const DEVICES_TOOL: Tool = findTool(edgeEpoch8 as CatalogFile, "herdr_devices");

/** The runtime tools of the public contract: the ones relayed to the workstation. */
export const RUNTIME_TOOL_NAMES: ReadonlySet<string> = new Set(
  EDGE_TOOLS.filter((tool) => tool.name !== DEVICES_TOOL.name).map((tool) => tool.name),
);

/** The runtime catalog edge epoch 8 is built from (its `runtime_epoch`). */
const RUNTIME_CATALOG = runtimeEpoch5 as CatalogFile;
if (RUNTIME_CATALOG.epoch !== edgeEpoch8.runtime_epoch) {
  throw new Error(`edge-epoch-8.json names runtime epoch ${edgeEpoch8.runtime_epoch}, the bundled catalog is epoch ${RUNTIME_CATALOG.epoch}`);
}

let expected: Promise<ContractIdentity> | undefined;

/** The runtime identity a device must announce to be relayed to (computed once per isolate). */
export function expectedRuntimeContract(): Promise<ContractIdentity> {
  expected ??= identityOf(RUNTIME_CATALOG.tools, RUNTIME_CATALOG.epoch);
  return expected;
}

/** Whether an announced runtime contract is exactly the one edge epoch 8 is built from. */
export async function contractCompatible(announced: AnnouncedContract | null | undefined): Promise<boolean> {
  if (!announced) return false;
  const want = await expectedRuntimeContract();
  return announced.epoch === want.epoch && announced.hash === want.hash && announced.tool_count === want.tool_count;
}

function findTool(file: CatalogFile, name: string): Tool {
  const tool = file.tools.find((candidate) => candidate.name === name);
  if (!tool) throw new Error(`edge-epoch-8.json has no ${name}`);
  return tool;
}
