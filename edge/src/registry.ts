/**
 * The Edge's one registry (a Durable Object, a single instance named "registry"): the pending
 * pairing, the paired devices, the pending connector consents and the connector grants the owner
 * approved. A Durable Object rather than KV because its storage is strongly consistent and its
 * calls run one at a time: the lockout counter of a pairing cannot be raced by parallel guesses, a
 * device paired a second ago can connect at once, a consent shown on the page is listed on the
 * workstation at once, and a grant approved or revoked a second ago is listed as it is (a KV list
 * may lag 60 s behind writes and deletes).
 */

import { DurableObject } from "cloudflare:workers";
import type { Env } from "./env.js";
import { constantTimeEqual, hmacHex, randomFromAlphabet, randomToken } from "./http.js";

/** A pairing code lives at most 10 minutes (issue 11). */
export const PAIRING_TTL_MAX_S = 600;
/** The fifth wrong code locks the pending pairing; the owner starts a new one. */
export const PAIRING_MAX_FAILURES = 5;
/**
 * Wrong codes allowed across all pairings per window, whoever sends them: against guessing a
 * 6-digit code over many pairings (each locks after 5), an attacker gets at most 20 guesses an
 * hour, a chance of 2 in 100,000 an hour while a pairing is open. An owner who mistypes a code
 * twice never comes near it. The Env variables of the same names (src/env.ts) override (tests).
 */
const WRONG_CODES_DEFAULT_MAX = 20;
const WRONG_CODES_DEFAULT_WINDOW_S = 3600;
const PAIRING_FAILURES_KEY = "pairing_failures";
/** A pending consent expires with the page that shows it. */
export const CONSENT_TTL_S = 600;
/** How long an expired consent is still told apart from an unknown one. */
const CONSENT_RETAIN_S = 24 * 3600;

export interface DeviceRecord {
  device_id: string;
  name: string;
  paired_at: number;
}

interface StoredDevice extends DeviceRecord {
  /** HMAC-SHA256(EDGE_HMAC_KEY, device_secret), hex: never the secret. */
  verifier: string;
}

interface StoredPairing {
  pairing_id: string;
  /** HMAC-SHA256(EDGE_HMAC_KEY, code), hex. */
  code_verifier: string;
  expires_at: number;
  failures: number;
}

export interface PairingTicket {
  pairing_id: string;
  code: string;
  expires_at: number;
}

export type RedeemResult =
  | { ok: true; device_id: string; device_secret: string }
  | { ok: false; code: "pairing_expired" | "pairing_locked" | "pairing_code_wrong"; message: string }
  | { ok: false; code: "rate_limited"; message: string; retry_after_s: number };

/** A pending or decided connector consent (src/consent.ts owns its meaning). */
export interface ConsentRecord {
  request_id: string;
  code: string;
  /** SHA-256 of the page's poll token, hex: only the browser that opened the page completes it. */
  poll_verifier: string;
  client_id: string;
  client_name: string;
  redirect_uri: string;
  created_at: number;
  expires_at: number;
  state: "pending" | "approved" | "denied";
  /** The library's parsed authorization request (JSON text), kept to complete it later. */
  auth_request_json: string;
  device_id?: string;
  grant_id?: string;
  /** Where the page sends the browser once decided (the client's redirect URI with code or error). */
  redirect_to?: string;
}

const DEVICE_PREFIX = "device:";
const CONSENT_PREFIX = "consent:";
const REFRESH_PREFIX = "refresh:";
const GRANT_USE_PREFIX = "grant-use:";
const GRANT_RECORD_PREFIX = "grant-record:";
const GRANT_REVOKED_PREFIX = "grant-revoked:";
const GRANT_CODE_PREFIX = "grant-code:";
const LEGACY_DONE_PREFIX = "grant-legacy-done:";
const GRANTS_SINCE_KEY = "grants_recorded_since";
/** An approved grant lives 10 minutes until its code is exchanged (the library's code TTL). */
export const GRANT_CODE_TTL_S = 600;
/** How long after the registry began recording grants a KV list surely shows every grant made
 * before: KV lists lag writes by up to 60 s; twice that for old isolates still running. */
const LEGACY_LAG_S = 120;
/** How long a revoked grant's id is remembered, so a lagging KV list cannot bring it back. */
const GRANT_REVOKED_RETAIN_S = 24 * 3600;

/**
 * A connector grant as the registry records it when the owner approves it (src/control.ts): the
 * list `grant.list` shows, strongly consistent. The OAuth library keeps the grant itself (its
 * tokens and props) in KV; this record is what lets the Edge list and revoke it without a KV list.
 */
export interface GrantRecord {
  grant_id: string;
  /** The device that approved it (the library's user id). */
  device_id: string;
  client_id: string;
  client_name: string;
  scope: string[];
  /** The resource the grant's tokens are bound to (`<origin>/mcp`). */
  resource: string | null;
  redirect_uri: string;
  created_at: number;
  /** When the library's grant ends unless used: GRANT_CODE_TTL_S after approval until its code
   * is exchanged, then the refresh token's idle lifetime after each exchange or refresh. */
  expires_at: number;
  /** "approval": recorded when approved; "kv": a grant made before records existed, found once in
   * the library's KV list (docs: edge/README.md, "Grants"). */
  source: "approval" | "kv";
}

/** Approving or denying a consent: the record as it stands, whether this call decided it, and
 * the older grants of the same client and device the approval replaces (to be revoked). */
export interface DecideOutcome {
  consent: ConsentRecord;
  decided: boolean;
  replaced: string[];
}

/** Earlier refresh tokens remembered per grant: three weeks of hourly refreshes, 32 KB of hashes
 * (a Durable Object value may hold 128 KiB); a token rotated away longer ago is refused by the
 * library all the same, only without revoking the grant. */
const REFRESH_CHAIN_KEPT = 500;

/** A grant's refresh tokens (SHA-256, hex): the current one, or the one a call is consuming,
 * and the earlier ones (oldest first). */
interface RefreshChain {
  current?: string;
  consumed?: string;
  previous: string[];
}

export class EdgeRegistry extends DurableObject<Env> {
  /** Seconds since the epoch, shifted by the test clock offset (0 outside tests). */
  async now(): Promise<number> {
    const offset = (await this.ctx.storage.get<number>("clock_offset_s")) ?? 0;
    return Math.floor(Date.now() / 1000) + offset;
  }

  /** Test configuration only (the /__test/clock route): shift this registry's clock. */
  async setClockOffset(offsetS: number): Promise<void> {
    await this.ctx.storage.put("clock_offset_s", offsetS);
  }

  /**
   * Consume a grant's refresh token (src/token.ts, strict rotation): "revoked" when the grant was
   * revoked in the last day (a KV read elsewhere may still show it); "current" when `tokenHash` is
   * the grant's current one (it is used up now); "reused" when it is one this grant was issued
   * before (rotated away, or consumed by a call still running); "unknown" for anything else, a
   * grant this registry never saw or a made-up token (the library refuses it, nothing is revoked:
   * the grant's id is in every token of it, so a made-up token proves no leak).
   */
  async consumeRefreshToken(grantId: string, tokenHash: string): Promise<"current" | "reused" | "unknown" | "revoked"> {
    if (await this.grantRevoked(grantId)) return "revoked";
    const key = REFRESH_PREFIX + grantId;
    const chain = await this.ctx.storage.get<RefreshChain>(key);
    if (chain === undefined) return "unknown";
    if (chain.current === tokenHash) {
      await this.ctx.storage.put(key, { previous: chain.previous, consumed: tokenHash } satisfies RefreshChain);
      return "current";
    }
    return chain.consumed === tokenHash || chain.previous.includes(tokenHash) ? "reused" : "unknown";
  }

  /** The library refused a refresh with the grant's current token (a bad client_id, say): the
   * token was not rotated, so it is current again unless another call used it meanwhile. */
  async restoreRefreshToken(grantId: string, tokenHash: string): Promise<void> {
    const key = REFRESH_PREFIX + grantId;
    const chain = await this.ctx.storage.get<RefreshChain>(key);
    if (chain?.consumed === tokenHash) {
      await this.ctx.storage.put(key, { previous: chain.previous, current: tokenHash } satisfies RefreshChain);
    }
  }

  /** The refresh token the library just issued for `grantId` is its current one; the consumed one
   * joins the grant's earlier tokens. The grant now lives `idleTtlS` from now (its record's
   * expires_at, as the library moves its own expiry on each exchange and refresh). */
  async recordRefreshToken(grantId: string, tokenHash: string, idleTtlS: number): Promise<void> {
    const key = REFRESH_PREFIX + grantId;
    const chain = await this.ctx.storage.get<RefreshChain>(key);
    const previous = [...(chain?.previous ?? []), ...(chain?.consumed === undefined ? [] : [chain.consumed])];
    await this.ctx.storage.put(key, {
      previous: previous.slice(-REFRESH_CHAIN_KEPT),
      current: tokenHash,
    } satisfies RefreshChain);
    const record = await this.ctx.storage.get<GrantRecord>(GRANT_RECORD_PREFIX + grantId);
    if (record !== undefined) {
      await this.ctx.storage.put(GRANT_RECORD_PREFIX + grantId, { ...record, expires_at: (await this.now()) + idleTtlS });
    }
  }

  /**
   * A grant the library revoked (or is about to): its record, refresh and use records go, and its
   * id is remembered for a day so a KV list still showing it (lag) cannot bring it back.
   */
  async forgetGrant(grantId: string): Promise<void> {
    await this.ctx.storage.delete([
      GRANT_RECORD_PREFIX + grantId,
      REFRESH_PREFIX + grantId,
      GRANT_USE_PREFIX + grantId,
      GRANT_CODE_PREFIX + grantId,
    ]);
    await this.ctx.storage.put(GRANT_REVOKED_PREFIX + grantId, await this.now());
  }

  /**
   * The authorization code `codeHash` (SHA-256, hex) of `grantId` is presented: "claimed" the
   * first time; "replayed" once it was claimed or exchanged (calls run one at a time, so of two
   * parallel presentations the second is the replay); "other" when another code holds the claim
   * (a made-up one: the library refuses whichever is not the grant's).
   */
  async claimAuthorizationCode(grantId: string, codeHash: string): Promise<"claimed" | "replayed" | "other"> {
    const held = await this.ctx.storage.get<string>(GRANT_CODE_PREFIX + grantId);
    if (held === codeHash) return "replayed";
    if (held !== undefined) return "other";
    await this.ctx.storage.put(GRANT_CODE_PREFIX + grantId, codeHash);
    return "claimed";
  }

  /** The library refused the exchange of a claimed code: it may be presented again. */
  async releaseAuthorizationCode(grantId: string, codeHash: string): Promise<void> {
    if ((await this.ctx.storage.get<string>(GRANT_CODE_PREFIX + grantId)) === codeHash) {
      await this.ctx.storage.delete(GRANT_CODE_PREFIX + grantId);
    }
  }

  /** The library exchanged `codeHash` for tokens: any later presentation of it is a replay. */
  async recordAuthorizationCode(grantId: string, codeHash: string): Promise<void> {
    await this.ctx.storage.put(GRANT_CODE_PREFIX + grantId, codeHash);
  }

  /** Whether `grantId` was revoked in the last day. */
  async grantRevoked(grantId: string): Promise<boolean> {
    return (await this.ctx.storage.get<number>(GRANT_REVOKED_PREFIX + grantId)) !== undefined;
  }

  /** The grant `grantId` when it is recorded, unexpired and belongs to `deviceId`. */
  async grantRecord(deviceId: string, grantId: string): Promise<GrantRecord | null> {
    const record = await this.ctx.storage.get<GrantRecord>(GRANT_RECORD_PREFIX + grantId);
    return record !== undefined && record.device_id === deviceId && (await this.now()) < record.expires_at ? record : null;
  }

  /** The unexpired grants of `deviceId`, oldest first; expired records and day-old revocation
   * marks are removed on the way. */
  async listGrantRecords(deviceId: string): Promise<GrantRecord[]> {
    const now = await this.now();
    const records = await this.ctx.storage.list<GrantRecord>({ prefix: GRANT_RECORD_PREFIX });
    const revoked = await this.ctx.storage.list<number>({ prefix: GRANT_REVOKED_PREFIX });
    const gone = [
      ...[...records.entries()]
        .filter(([, record]) => now >= record.expires_at)
        .flatMap(([key, record]) => [key, GRANT_CODE_PREFIX + record.grant_id]),
      ...[...revoked.entries()].filter(([, at]) => now >= at + GRANT_REVOKED_RETAIN_S).map(([key]) => key),
    ];
    if (gone.length > 0) await this.ctx.storage.delete(gone);
    return [...records.values()]
      .filter((record) => record.device_id === deviceId && now < record.expires_at)
      .sort((a, b) => a.created_at - b.created_at || a.grant_id.localeCompare(b.grant_id));
  }

  /**
   * Whether grants of `deviceId` made before the registry recorded grants may still be missing
   * from it: true until a KV list taken LEGACY_LAG_S after recording began was imported.
   */
  async legacyGrantsPending(deviceId: string): Promise<boolean> {
    await this.grantsRecordedSince();
    return (await this.ctx.storage.get<boolean>(LEGACY_DONE_PREFIX + deviceId)) !== true;
  }

  /**
   * Import the grants of `deviceId` a KV list showed (`listed`, read before this call): those
   * neither recorded nor revoked become records (source "kv"). Once the list was read
   * LEGACY_LAG_S after recording began (`listedAt`, registry clock), it held every grant made
   * before, and the device's KV list is never read again.
   */
  async importLegacyGrants(deviceId: string, listed: GrantRecord[], listedAt: number): Promise<void> {
    for (const grant of listed) {
      if (grant.device_id !== deviceId) continue;
      const [record, revoked] = await Promise.all([
        this.ctx.storage.get<GrantRecord>(GRANT_RECORD_PREFIX + grant.grant_id),
        this.ctx.storage.get<number>(GRANT_REVOKED_PREFIX + grant.grant_id),
      ]);
      if (record === undefined && revoked === undefined) {
        await this.ctx.storage.put(GRANT_RECORD_PREFIX + grant.grant_id, { ...grant, source: "kv" } satisfies GrantRecord);
      }
    }
    if (listedAt >= (await this.grantsRecordedSince()) + LEGACY_LAG_S) {
      await this.ctx.storage.put(LEGACY_DONE_PREFIX + deviceId, true);
    }
  }

  /** Test configuration only (the /__test/legacy-grant route): make `grantId` look like a grant
   * made before the registry recorded grants (no record, and recording began just now). */
  async forgetGrantRecordAsLegacy(grantId: string): Promise<void> {
    await this.ctx.storage.delete(GRANT_RECORD_PREFIX + grantId);
    const done = await this.ctx.storage.list({ prefix: LEGACY_DONE_PREFIX });
    await this.ctx.storage.delete([...done.keys()]);
    await this.ctx.storage.put(GRANTS_SINCE_KEY, await this.now());
  }

  /** When this registry began recording grants (set by the first grant call after the deploy
   * that introduced records). */
  private async grantsRecordedSince(): Promise<number> {
    let since = await this.ctx.storage.get<number>(GRANTS_SINCE_KEY);
    if (since === undefined) {
      since = await this.now();
      await this.ctx.storage.put(GRANTS_SINCE_KEY, since);
    }
    return since;
  }

  /** A call used grant `grantId` at `at` (seconds): grant.list shows it as last_used_at. */
  async recordGrantUse(grantId: string, at: number): Promise<void> {
    await this.ctx.storage.put(GRANT_USE_PREFIX + grantId, at);
  }

  /** The last recorded use of each grant in `grantIds` (absent: never used). */
  async grantUses(grantIds: string[]): Promise<Record<string, number>> {
    const stored = await this.ctx.storage.get<number>(grantIds.map((id) => GRANT_USE_PREFIX + id));
    return Object.fromEntries([...stored].map(([key, at]) => [key.slice(GRANT_USE_PREFIX.length), at]));
  }

  /** Start a pairing, replacing any pending one: a fresh 6-digit code valid for `ttlS` seconds
   * (at most PAIRING_TTL_MAX_S). */
  async startPairing(ttlS: number): Promise<PairingTicket> {
    const code = randomFromAlphabet("0123456789", 6);
    const pairing: StoredPairing = {
      pairing_id: `pair_${randomToken(9)}`,
      code_verifier: await hmacHex(this.env.EDGE_HMAC_KEY, `pairing-code:${code}`),
      expires_at: (await this.now()) + Math.min(ttlS, PAIRING_TTL_MAX_S),
      failures: 0,
    };
    await this.ctx.storage.put("pairing", pairing);
    return { pairing_id: pairing.pairing_id, code, expires_at: pairing.expires_at };
  }

  /**
   * Redeem the pending pairing's code for a new device:
   * 1. no pending pairing, or past its expiry: pairing_expired;
   * 2. five wrong codes already: pairing_locked (even for the right code now);
   * 3. the wrong codes of all pairings in the last window reached the cap: rate_limited, with
   *    the seconds until the oldest leaves the window; no code is checked meanwhile, the right one
   *    neither (else guessing would go on, only unanswered);
   * 4. a wrong code counts a failure of the pairing (the fifth locks it) and of the window:
   *    pairing_code_wrong;
   * 5. the right code ends the pairing (a code works once) and records the device's verifier.
   */
  async redeemPairing(code: string, name: string): Promise<RedeemResult> {
    const now = await this.now();
    const pairing = await this.ctx.storage.get<StoredPairing>("pairing");
    if (pairing === undefined || now >= pairing.expires_at) {
      return { ok: false, code: "pairing_expired", message: "no pairing is pending or it expired: open /pair for a new code" };
    }
    if (pairing.failures >= PAIRING_MAX_FAILURES) {
      return { ok: false, code: "pairing_locked", message: "too many wrong codes: open /pair for a new code" };
    }
    const windowS = positiveInteger(this.env.PAIRING_WRONG_CODES_WINDOW_S, WRONG_CODES_DEFAULT_WINDOW_S);
    const recent = ((await this.ctx.storage.get<number[]>(PAIRING_FAILURES_KEY)) ?? []).filter((at) => at > now - windowS);
    const oldest = recent[0];
    if (oldest !== undefined && recent.length >= positiveInteger(this.env.PAIRING_WRONG_CODES_MAX, WRONG_CODES_DEFAULT_MAX)) {
      const retryAfter = Math.max(1, oldest + windowS - now);
      return {
        ok: false,
        code: "rate_limited",
        message: `too many wrong pairing codes on this Edge lately; pairing is paused for ${retryAfter} s (the pending code stays valid until it expires)`,
        retry_after_s: retryAfter,
      };
    }
    const offered = await hmacHex(this.env.EDGE_HMAC_KEY, `pairing-code:${code}`);
    if (!(await constantTimeEqual(offered, pairing.code_verifier))) {
      pairing.failures += 1;
      await this.ctx.storage.put({ pairing, [PAIRING_FAILURES_KEY]: [...recent, now] });
      return { ok: false, code: "pairing_code_wrong", message: "wrong pairing code: check the code /pair shows" };
    }
    await this.ctx.storage.delete("pairing");
    const deviceSecret = randomToken(32);
    const device: StoredDevice = {
      device_id: `dev_${randomToken(12)}`,
      name,
      paired_at: await this.now(),
      verifier: await hmacHex(this.env.EDGE_HMAC_KEY, `device-secret:${deviceSecret}`),
    };
    await this.ctx.storage.put(DEVICE_PREFIX + device.device_id, device);
    return { ok: true, device_id: device.device_id, device_secret: deviceSecret };
  }

  /** Whether `secret` is the secret of device `deviceId` (an unknown device is never authentic). */
  async authenticateDevice(deviceId: string, secret: string): Promise<boolean> {
    const device = await this.ctx.storage.get<StoredDevice>(DEVICE_PREFIX + deviceId);
    const offered = await hmacHex(this.env.EDGE_HMAC_KEY, `device-secret:${secret}`);
    // Compare against a stand-in for an unknown device so both paths cost the same.
    return (await constantTimeEqual(offered, device?.verifier ?? "0".repeat(64))) && device !== undefined;
  }

  /** The paired devices (no verifiers), oldest first. */
  async listDevices(): Promise<DeviceRecord[]> {
    const stored = await this.ctx.storage.list<StoredDevice>({ prefix: DEVICE_PREFIX });
    return [...stored.values()]
      .map(({ device_id, name, paired_at }) => ({ device_id, name, paired_at }))
      .sort((a, b) => a.paired_at - b.paired_at);
  }

  async putConsent(consent: ConsentRecord): Promise<void> {
    await this.ctx.storage.put(CONSENT_PREFIX + consent.request_id, consent);
  }

  /**
   * The consent `requestId` and whether it expired, or null when unknown. An expired consent is
   * kept a day (so the owner hears consent_expired, not consent_not_found), then removed.
   */
  async getConsent(requestId: string): Promise<{ consent: ConsentRecord; expired: boolean } | null> {
    const consent = await this.ctx.storage.get<ConsentRecord>(CONSENT_PREFIX + requestId);
    if (consent === undefined) return null;
    const now = await this.now();
    if (now >= consent.expires_at + CONSENT_RETAIN_S) {
      await this.ctx.storage.delete(CONSENT_PREFIX + requestId);
      return null;
    }
    return { consent, expired: now >= consent.expires_at };
  }

  /** The consents still pending, oldest first (long-expired ones are removed on the way). */
  async listPendingConsents(): Promise<ConsentRecord[]> {
    const now = await this.now();
    const stored = await this.ctx.storage.list<ConsentRecord>({ prefix: CONSENT_PREFIX });
    const gone = [...stored.entries()]
      .filter(([, consent]) => now >= consent.expires_at + CONSENT_RETAIN_S)
      .map(([key]) => key);
    if (gone.length > 0) await this.ctx.storage.delete(gone);
    return [...stored.values()]
      .filter((consent) => now < consent.expires_at && consent.state === "pending")
      .sort((a, b) => a.created_at - b.created_at);
  }

  /**
   * Decide a pending consent: the transition happens at most once (calls run one at a time), so
   * two approvals cannot complete the same request twice. Null when it is unknown or expired;
   * `decided: false` with the record as it stands when another call decided it first.
   * An approval records its grant (`grant`) in the same step, and the device's older grants of
   * the same client and resource (for a client ID metadata document client, also the same
   * redirect URI: one installation) are replaced: their records go and their ids are returned
   * for the caller to revoke with the library (which would otherwise find them by a KV list).
   */
  async decideConsent(
    requestId: string,
    decide: { state: "approved" | "denied"; device_id: string; grant_id?: string; redirect_to: string },
    grant?: GrantRecord,
  ): Promise<DecideOutcome | null> {
    const found = await this.getConsent(requestId);
    if (found === null || found.expired) return null;
    const consent = found.consent;
    if (consent.state !== "pending") return { consent, decided: false, replaced: [] };
    const decided: ConsentRecord = { ...consent, ...decide };
    await this.putConsent(decided);
    if (grant === undefined) return { consent: decided, decided: true, replaced: [] };
    await this.grantsRecordedSince();
    const replaced = (await this.listGrantRecords(grant.device_id))
      .filter(
        (older) =>
          older.client_id === grant.client_id &&
          older.resource === grant.resource &&
          (!isClientDocumentUrl(grant.client_id) || older.redirect_uri === grant.redirect_uri),
      )
      .map((older) => older.grant_id);
    for (const grantId of replaced) await this.forgetGrant(grantId);
    await this.ctx.storage.put(GRANT_RECORD_PREFIX + grant.grant_id, grant);
    return { consent: decided, decided: true, replaced };
  }
}

/** A positive integer from a variable, else the default. */
function positiveInteger(value: string | undefined, fallback: number): number {
  const parsed = Number(value);
  return value !== undefined && Number.isInteger(parsed) && parsed > 0 ? parsed : fallback;
}

/** Whether a client id names a client ID metadata document (an https URL with a path), whose
 * client id every installation shares. */
function isClientDocumentUrl(clientId: string): boolean {
  try {
    const url = new URL(clientId);
    return url.protocol === "https:" && url.pathname !== "/";
  } catch {
    return false;
  }
}

/** The registry's single instance: the one typed way to it (src/env.ts declares the binding
 * without this class, so that the bindings' module imports none of the modules that use it). */
export function registry(env: Env): DurableObjectStub<EdgeRegistry> {
  return env.EDGE_REGISTRY.get(env.EDGE_REGISTRY.idFromName("registry")) as unknown as DurableObjectStub<EdgeRegistry>;
}
