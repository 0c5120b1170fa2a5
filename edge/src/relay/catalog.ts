/**
 * The frozen catalogs the Edge knows, bundled into the Worker at build time from
 * manifests/contracts/ (the same files the Python package freezes; never fetched at run time).
 *
 * The public Edge contract is the runtime catalog the link announced plus the edge-local
 * `herdr_devices`. For runtime epoch 5 that list is exactly manifests/contracts/edge-epoch-8.json
 * (tests/test_edge_relay_contract.py pins its hash and compares what /mcp serves to it). A link
 * on the rollback baseline (runtime epoch 4) is still relayed, with epoch 4's tools.
 */
import edgeEpoch8 from "../../../manifests/contracts/edge-epoch-8.json";
import runtimeEpoch4 from "../../../manifests/contracts/runtime-epoch-4.json";
import runtimeEpoch5 from "../../../manifests/contracts/runtime-epoch-5.json";
import type { AnnouncedContract } from "./frames.js";
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

/** The runtime epoch the public Edge contract (edge epoch 8) is made of: what tools/list serves
 * for a device that has not announced a runtime yet. */
export const PUBLIC_RUNTIME_EPOCH: number = edgeEpoch8.runtime_epoch;

/** The edge-local tool, as frozen in edge-epoch-8.json. */
export const DEVICES_TOOL: Tool = findTool(edgeEpoch8 as CatalogFile, "herdr_devices");

const RUNTIME_CATALOGS: readonly CatalogFile[] = [runtimeEpoch4 as CatalogFile, runtimeEpoch5 as CatalogFile];

export interface KnownCatalog {
  identity: ContractIdentity;
  tools: Tool[];
}

let known: Promise<KnownCatalog[]> | undefined;

/** Every frozen runtime catalog with its identity, computed once per isolate. */
export function runtimeCatalogs(): Promise<KnownCatalog[]> {
  known ??= Promise.all(
    RUNTIME_CATALOGS.map(async (file) => ({ identity: await identityOf(file.tools, file.epoch), tools: file.tools })),
  );
  return known;
}

/** The frozen runtime catalog whose identity equals `identity`, or undefined (contract_mismatch). */
export async function catalogFor(identity: AnnouncedContract | null | undefined): Promise<KnownCatalog | undefined> {
  if (!identity) return undefined;
  const catalogs = await runtimeCatalogs();
  return catalogs.find(
    (catalog) =>
      catalog.identity.epoch === identity.epoch &&
      catalog.identity.hash === identity.hash &&
      catalog.identity.tool_count === identity.tool_count,
  );
}

/** What /mcp tools/list serves for a link on `catalog`: its runtime tools plus herdr_devices. */
export function publicTools(catalog: KnownCatalog): Tool[] {
  return [...catalog.tools, DEVICES_TOOL];
}

function findTool(file: CatalogFile, name: string): Tool {
  const tool = file.tools.find((candidate) => candidate.name === name);
  if (!tool) throw new Error(`edge-epoch-8.json has no ${name}`);
  return tool;
}
