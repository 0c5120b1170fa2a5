/**
 * The Edge's one registry (a Durable Object, a single instance named "registry"): the pending
 * pairing, the paired devices and the pending connector consents. A Durable Object rather than KV
 * because its storage is strongly consistent and its calls run one at a time: the lockout counter
 * of a pairing cannot be raced by parallel guesses, a device paired a second ago can connect at
 * once, and a consent shown on the page is listed on the workstation at once (KV may lag 60 s).
 */

import { DurableObject } from "cloudflare:workers";
import type { Env } from "./env.js";
import { constantTimeEqual, hmacHex, randomFromAlphabet, randomToken } from "./http.js";

/** A pairing code lives at most 10 minutes (issue 11). */
export const PAIRING_TTL_MAX_S = 600;
/** The fifth wrong code locks the pending pairing; the owner starts a new one. */
export const PAIRING_MAX_FAILURES = 5;
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
  | { ok: false; code: "pairing_expired" | "pairing_locked" | "pairing_code_wrong"; message: string };

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
   * Consume a grant's refresh token (src/oauth.ts, strict rotation): "current" when `tokenHash` is
   * the grant's current one (it is used up now); "reused" when it is one this grant was issued
   * before (rotated away, or consumed by a call still running); "unknown" for anything else, a
   * grant this registry never saw or a made-up token (the library refuses it, nothing is revoked:
   * the grant's id is in every token of it, so a made-up token proves no leak).
   */
  async consumeRefreshToken(grantId: string, tokenHash: string): Promise<"current" | "reused" | "unknown"> {
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
   * joins the grant's earlier tokens. */
  async recordRefreshToken(grantId: string, tokenHash: string): Promise<void> {
    const key = REFRESH_PREFIX + grantId;
    const chain = await this.ctx.storage.get<RefreshChain>(key);
    const previous = [...(chain?.previous ?? []), ...(chain?.consumed === undefined ? [] : [chain.consumed])];
    await this.ctx.storage.put(key, {
      previous: previous.slice(-REFRESH_CHAIN_KEPT),
      current: tokenHash,
    } satisfies RefreshChain);
  }

  /** A revoked grant's refresh and use records go with it. */
  async forgetGrant(grantId: string): Promise<void> {
    await this.ctx.storage.delete([REFRESH_PREFIX + grantId, GRANT_USE_PREFIX + grantId]);
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
   * 3. a wrong code counts a failure (the fifth locks it): pairing_code_wrong;
   * 4. the right code ends the pairing (a code works once) and records the device's verifier.
   */
  async redeemPairing(code: string, name: string): Promise<RedeemResult> {
    const pairing = await this.ctx.storage.get<StoredPairing>("pairing");
    if (pairing === undefined || (await this.now()) >= pairing.expires_at) {
      return { ok: false, code: "pairing_expired", message: "no pairing is pending or it expired: open /pair for a new code" };
    }
    if (pairing.failures >= PAIRING_MAX_FAILURES) {
      return { ok: false, code: "pairing_locked", message: "too many wrong codes: open /pair for a new code" };
    }
    const offered = await hmacHex(this.env.EDGE_HMAC_KEY, `pairing-code:${code}`);
    if (!(await constantTimeEqual(offered, pairing.code_verifier))) {
      pairing.failures += 1;
      await this.ctx.storage.put("pairing", pairing);
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
   * the record as it stands when it was already decided (its redirect_to is another call's).
   */
  async decideConsent(
    requestId: string,
    decide: { state: "approved" | "denied"; device_id: string; grant_id?: string; redirect_to: string },
  ): Promise<ConsentRecord | null> {
    const found = await this.getConsent(requestId);
    if (found === null || found.expired) return null;
    const consent = found.consent;
    if (consent.state !== "pending") return consent;
    const decided: ConsentRecord = { ...consent, ...decide };
    await this.putConsent(decided);
    return decided;
  }
}

/** The registry's single instance. */
export function registry(env: Env): DurableObjectStub<EdgeRegistry> {
  return env.EDGE_REGISTRY.get(env.EDGE_REGISTRY.idFromName("registry"));
}
