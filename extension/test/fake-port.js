// A stand-in for the Port chrome.runtime.connectNative returns (the part native-port.js uses:
// postMessage, onMessage, onDisconnect): records what is posted, plays frames and disconnects.
// Shared by native-port.test.js and push-follower.test.js; it holds no tests itself.

export class FakePort {
  constructor() {
    this.posted = [];
    this.messageListeners = [];
    this.disconnectListeners = [];
    this.onMessage = { addListener: (listener) => this.messageListeners.push(listener) };
    this.onDisconnect = { addListener: (listener) => this.disconnectListeners.push(listener) };
  }

  postMessage(frame) {
    this.posted.push(frame);
  }

  deliver(frame) {
    for (const listener of this.messageListeners) {
      listener(frame);
    }
  }

  drop() {
    for (const listener of this.disconnectListeners) {
      listener();
    }
  }
}
