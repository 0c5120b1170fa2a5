import assert from "node:assert/strict";
import { test } from "node:test";

import { conversationUrl, isScope, newConversationUrl, pageScope, wakeTarget } from "../src/lib/scope.js";

test("a conversation page is its own scope", () => {
  const page = pageScope("https://chatgpt.com/c/6a1f0c2e-0000-4000-8000-000000000001?model=x#end");
  assert.deepEqual(page, {
    site: "chatgpt",
    kind: "conv",
    scope: "chatgpt:conv:6a1f0c2e-0000-4000-8000-000000000001",
    convKey: "6a1f0c2e-0000-4000-8000-000000000001",
    projectId: null,
  });
  assert.equal(conversationUrl(page), "https://chatgpt.com/c/6a1f0c2e-0000-4000-8000-000000000001");
});

test("a Project's home and its conversations share the Project scope; the name slug is dropped", () => {
  const home = pageScope("https://chatgpt.com/g/g-p-0a1b2c-my-project/project");
  assert.equal(home.scope, "chatgpt:project:g-p-0a1b2c");
  assert.equal(home.convKey, null);
  assert.equal(conversationUrl(home), null);
  const conversation = pageScope("https://chatgpt.com/g/g-p-0a1b2c-my-project/c/abc-123");
  assert.equal(conversation.scope, "chatgpt:project:g-p-0a1b2c");
  assert.equal(conversation.kind, "project");
  assert.equal(conversation.convKey, "abc-123");
  assert.equal(conversationUrl(conversation), "https://chatgpt.com/g/g-p-0a1b2c/c/abc-123");
});

test("the root page is a tab-local pending scope, only with a tab id", () => {
  assert.equal(pageScope("https://chatgpt.com/", "tab-17").scope, "chatgpt:root:tab-17");
  assert.equal(pageScope("https://chatgpt.com/"), null);
  assert.equal(pageScope("https://chatgpt.com/", "bad id!"), null);
});

test("other pages and other hosts have no scope", () => {
  for (const url of [
    "https://chatgpt.com/gpts",
    "https://chatgpt.com/g/not-a-project/project",
    "https://chatgpt.com/g/g-p-0a1b/c/",
    "https://chatgpt.com/c/bad$id",
    "http://chatgpt.com/c/abc",
    "https://chatgpt.com:8443/c/abc",
    "https://evil.example/c/abc",
    "not a url",
  ]) {
    assert.equal(pageScope(url, "tab-1"), null, url);
  }
});

test("every scope the pages give matches the protocol's pattern", () => {
  assert.ok(isScope("chatgpt:conv:abc"));
  assert.ok(isScope("zai:conv:abc"));
  assert.ok(!isScope("chatgpt:conv:"));
  assert.ok(!isScope("chatgpt:thread:abc"));
  assert.ok(!isScope(`chatgpt:conv:${"a".repeat(201)}`));
  assert.ok(isScope(pageScope("https://chatgpt.com/g/g-p-ff/c/x1").scope));
});

test("wakes go to the conversation itself, or to a Project's active conversation", () => {
  assert.equal(wakeTarget("chatgpt:conv:abc", null), "abc");
  assert.equal(wakeTarget("chatgpt:project:g-p-ff", { active_conv_key: "c9" }), "c9");
  assert.equal(wakeTarget("chatgpt:project:g-p-ff", { active_conv_key: null }), null);
  assert.equal(wakeTarget("chatgpt:root:tab-1", { active_conv_key: "c9" }), null);
  assert.equal(wakeTarget("nonsense", {}), null);
});

test("z.ai and DeepSeek pages: a conversation scope per chat id, a tab-local root, their URLs", () => {
  const zai = pageScope("https://chat.z.ai/c/zc123", "tab-4");
  assert.deepEqual(zai, { site: "zai", kind: "conv", scope: "zai:conv:zc123", convKey: "zc123", projectId: null });
  assert.equal(conversationUrl(zai), "https://chat.z.ai/c/zc123");
  const deepseek = pageScope("https://chat.deepseek.com/a/chat/s/ds-9", "tab-4");
  assert.equal(deepseek.scope, "deepseek:conv:ds-9");
  assert.equal(conversationUrl(deepseek), "https://chat.deepseek.com/a/chat/s/ds-9");
  assert.equal(pageScope("https://chat.z.ai/", "tab-4").scope, "zai:root:tab-4");
  assert.equal(pageScope("https://chat.z.ai/", null), null);
  assert.equal(pageScope("https://chat.z.ai/c/zc123/extra", "tab-4"), null);
  assert.equal(pageScope("https://chat.deepseek.com/c/ds-9", "tab-4"), null, "not DeepSeek's route");
  assert.equal(pageScope("https://example.com/c/zc123", "tab-4"), null);
  assert.equal(newConversationUrl("zai"), "https://chat.z.ai/");
  assert.equal(newConversationUrl("deepseek"), "https://chat.deepseek.com/");
  assert.equal(newConversationUrl("chatgpt"), "https://chatgpt.com/");
});

test("a custom GPT's conversation is a conversation scope, like /c/<id>; the GPT itself is none", () => {
  const page = pageScope("https://chatgpt.com/g/g-abc123XYZ-code-helper/c/6790ab-12cd", "tab-3");
  assert.deepEqual(
    { kind: page.kind, scope: page.scope, convKey: page.convKey, projectId: page.projectId },
    { kind: "conv", scope: "chatgpt:conv:6790ab-12cd", convKey: "6790ab-12cd", projectId: null },
  );
  assert.equal(conversationUrl(page), "https://chatgpt.com/g/g-abc123XYZ-code-helper/c/6790ab-12cd");
  assert.equal(wakeTarget(page.scope, null), "6790ab-12cd");
  assert.equal(pageScope("https://chatgpt.com/g/g-abc123XYZ/c/6790ab-12cd").scope, "chatgpt:conv:6790ab-12cd", "a GPT without a slug");
  for (const url of [
    "https://chatgpt.com/g/g-abc123XYZ-code-helper", // the GPT's home: no conversation yet
    "https://chatgpt.com/g/g-abc123XYZ-code-helper/c/",
    "https://chatgpt.com/g/g-abc123XYZ-code-helper/c/bad$id",
    "https://chatgpt.com/g/g-/c/6790ab",
  ]) {
    assert.equal(pageScope(url, "tab-3"), null, url);
  }
  // A Project (g-p-<hex>) is still the Project's scope.
  assert.equal(pageScope("https://chatgpt.com/g/g-p-0a1b-notes/c/x1").scope, "chatgpt:project:g-p-0a1b");
});
