// Host -> browser replies over 1 MiB arrive as `{id, chunk: {index, count, data}}` frames, `data`
// a slice of the reply's JSON text (docs/browser-protocol.md section 4). Pure reassembly.

export class ChunkError extends Error {
  constructor(message) {
    super(message);
    this.code = "chunk_invalid";
  }
}

export class Reassembler {
  constructor() {
    this.parts = new Map();
  }

  /** Take one chunk frame; the whole reply (parsed) once its last chunk arrived, else null. */
  add(frame) {
    const { id, chunk } = frame;
    const { index, count, data } = chunk ?? {};
    if (!Number.isInteger(count) || count < 1 || !Number.isInteger(index) || index < 0 || index >= count) {
      this.parts.delete(id);
      throw new ChunkError(`chunk ${index} of ${count} for ${id} is out of range`);
    }
    if (typeof data !== "string") {
      this.parts.delete(id);
      throw new ChunkError(`chunk ${index} for ${id} carries no text`);
    }
    let entry = this.parts.get(id);
    if (!entry) {
      entry = { count, slices: [] };
      this.parts.set(id, entry);
    }
    if (entry.count !== count || index !== entry.slices.length) {
      this.parts.delete(id);
      throw new ChunkError(`chunk ${index} of ${count} for ${id} arrived out of order`);
    }
    entry.slices.push(data);
    if (entry.slices.length < count) {
      return null;
    }
    this.parts.delete(id);
    const reply = JSON.parse(entry.slices.join(""));
    return reply;
  }

  /** Forget what was gathered for `id` (its request was abandoned), or everything. */
  drop(id) {
    if (id === undefined) {
      this.parts.clear();
    } else {
      this.parts.delete(id);
    }
  }
}
