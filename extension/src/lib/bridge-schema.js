// A small JSON Schema validator for the bridge: a tool call's `args` checked against the tool's
// `inputSchema` from tools/list before anything is sent. The keywords it knows: type (one or a
// list; "integer" is a whole number), required, properties, additionalProperties (false or a
// schema), items, enum, const, minLength/maxLength, minimum/maximum, exclusiveMinimum/
// exclusiveMaximum, minItems/maxItems, pattern, anyOf/oneOf (one branch must match). Any other
// keyword (format, $ref, ...) is not checked here; the runtime validates again and answers
// invalid arguments itself. Errors name the JSON path of what is wrong.

function typeOf(value) {
  if (value === null) {
    return "null";
  }
  if (Array.isArray(value)) {
    return "array";
  }
  return typeof value; // "object" | "string" | "number" | "boolean"
}

function matchesType(value, type) {
  switch (type) {
    case "integer":
      return typeof value === "number" && Number.isInteger(value);
    case "number":
      return typeof value === "number" && Number.isFinite(value);
    default:
      return typeOf(value) === type;
  }
}

/** The list of errors (strings, each starting with its path) of `value` against `schema`; empty when valid. */
export function validate(schema, value, path = "args") {
  const errors = [];
  check(schema, value, path, errors);
  return errors;
}

function check(schema, value, path, errors) {
  if (schema === true || schema === undefined || schema === null) {
    return;
  }
  if (schema === false) {
    errors.push(`${path}: not allowed`);
    return;
  }
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((type) => matchesType(value, type))) {
      errors.push(`${path}: must be ${types.join(" or ")}, not ${typeOf(value)}`);
      return;
    }
  }
  if (schema.enum !== undefined && !schema.enum.some((item) => same(item, value))) {
    errors.push(`${path}: must be one of ${JSON.stringify(schema.enum)}`);
  }
  if (schema.const !== undefined && !same(schema.const, value)) {
    errors.push(`${path}: must be ${JSON.stringify(schema.const)}`);
  }
  for (const key of ["anyOf", "oneOf"]) {
    if (Array.isArray(schema[key])) {
      const matching = schema[key].filter((branch) => validate(branch, value, path).length === 0).length;
      if (key === "anyOf" ? matching === 0 : matching !== 1) {
        errors.push(`${path}: must match ${key === "anyOf" ? "at least one" : "exactly one"} of its ${schema[key].length} forms`);
      }
    }
  }
  if (typeof value === "string") {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) {
      errors.push(`${path}: at least ${schema.minLength} characters`);
    }
    if (schema.maxLength !== undefined && length > schema.maxLength) {
      errors.push(`${path}: at most ${schema.maxLength} characters`);
    }
    if (typeof schema.pattern === "string") {
      let pattern;
      try {
        pattern = new RegExp(schema.pattern, "u");
      } catch {
        pattern = null; // a pattern JS cannot read is left to the runtime
      }
      if (pattern && !pattern.test(value)) {
        errors.push(`${path}: must match ${schema.pattern}`);
      }
    }
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) {
      errors.push(`${path}: at least ${schema.minimum}`);
    }
    if (schema.maximum !== undefined && value > schema.maximum) {
      errors.push(`${path}: at most ${schema.maximum}`);
    }
    if (typeof schema.exclusiveMinimum === "number" && value <= schema.exclusiveMinimum) {
      errors.push(`${path}: more than ${schema.exclusiveMinimum}`);
    }
    if (typeof schema.exclusiveMaximum === "number" && value >= schema.exclusiveMaximum) {
      errors.push(`${path}: less than ${schema.exclusiveMaximum}`);
    }
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) {
      errors.push(`${path}: at least ${schema.minItems} items`);
    }
    if (schema.maxItems !== undefined && value.length > schema.maxItems) {
      errors.push(`${path}: at most ${schema.maxItems} items`);
    }
    if (schema.items && typeof schema.items === "object") {
      value.forEach((item, index) => check(schema.items, item, `${path}[${index}]`, errors));
    }
  }
  if (typeOf(value) === "object") {
    const properties = schema.properties ?? {};
    for (const name of schema.required ?? []) {
      if (!Object.hasOwn(value, name)) {
        errors.push(`${path}.${name}: required`);
      }
    }
    for (const [name, item] of Object.entries(value)) {
      if (Object.hasOwn(properties, name)) {
        check(properties[name], item, `${path}.${name}`, errors);
      } else if (schema.additionalProperties === false) {
        errors.push(`${path}.${name}: unknown property`);
      } else if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
        check(schema.additionalProperties, item, `${path}.${name}`, errors);
      }
    }
  }
}

function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}
