// Content scripts cannot be ES modules; this classic script imports the bridge's module.
(async () => {
  const module = await import(chrome.runtime.getURL("src/content/bridge-main.js"));
  await module.start();
})().catch((error) => console.error("herdr-mcp: the bridge did not start", error));
