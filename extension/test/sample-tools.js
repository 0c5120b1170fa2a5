// Two tools as the runtime's tools/list gives them (name, description, inputSchema, annotations),
// shared by the bridge's tests (bridge.test.js, bridge-worker.test.js); it holds no tests itself.

export const READ = {
  name: "herdr_fs_read",
  description: "Read a file.",
  inputSchema: {
    type: "object",
    properties: { path: { type: "string", minLength: 1 }, limit: { type: "integer", minimum: 1, maximum: 100 } },
    required: ["path"],
    additionalProperties: false,
  },
  annotations: { readOnlyHint: true },
};
export const WRITE = {
  name: "herdr_fs_write",
  description: "Write a file.",
  inputSchema: {
    type: "object",
    properties: { path: { type: "string" }, content: { type: "string" }, mode: { enum: ["create", "replace"] } },
    required: ["path", "content"],
  },
};
