/**
 * Where the link's `control_request` frames go (docs/edge-protocol.md, "Control methods"): the
 * owner's connector commands, carried over the authenticated link. Their meaning (consents and
 * grants) belongs to src/consent.ts; the relay only carries the frame there and the answer back.
 */

export type ControlOutcome =
  | { result: Record<string, unknown> }
  | { error: { code: string; message: string } };

/**
 * SEAM (EDGE-RELAY -> EDGE-WORKER): until src/consent.ts exports its handler, every method is
 * answered `method_not_found`; wiring it is one import and one call here.
 */
export async function handleControlRequest(
  _env: unknown,
  _deviceId: string,
  method: string,
  _params: Record<string, unknown>,
): Promise<ControlOutcome> {
  return { error: { code: "method_not_found", message: `the Edge does not serve control method ${method} yet` } };
}
