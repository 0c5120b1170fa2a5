"""The fs tools of the epoch-5 contract, one module per concern:

- `reading`: fs_read, fs_list, fs_grep (read-only; grep's engines live in `runtime.grep`);
- `image`: fs_image and the PNG, JPEG, GIF and WebP header parsers;
- `editing`: fs_edit and fs_write; `patching`: fs_patch (the patch format is `tools.patch`);
- `access`: what they share (capped reads, UTF-8, secret refusal).

Each tool is a synchronous function `(roots, policy, args) -> result` over arguments the
dispatcher already parsed (`runtime.tools.arguments`: validated against the frozen catalog
schema, every catalog default filled in), so a tool indexes them and never checks a type or
restates a default. Every refusal is a ToolError with a stable code, raised before anything changes.
Mutations (managed roots only) go through `boundary.gates` in their fixed order and are written
by `boundary.atomic`.
"""
