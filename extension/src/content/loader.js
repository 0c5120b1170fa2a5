// Content scripts cannot be ES modules; this classic script imports the module that is.
(async () => {
  const module = await import(chrome.runtime.getURL("src/content/main.js"));
  module.start();
})().catch((error) => console.error("herdr-mcp: the content script did not start", error));
