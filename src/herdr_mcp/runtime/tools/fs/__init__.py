"""The fs tools of the epoch-5 contract, one module per concern:

- `reading`: fs_read, fs_list, fs_grep (read-only; grep's engines live in `runtime.grep`);
- `image`: fs_image and the PNG, JPEG, GIF and WebP header parsers;
- `editing`: fs_edit and fs_write; `patching`: fs_patch (the patch format is `tools.patch`);
- `access` and `arguments`: what they share (capped reads, UTF-8, secret refusal, arguments).

Each tool is a synchronous function `(roots, policy, args) -> result` over arguments already
validated against the frozen catalog schema (defaults may be missing; the catalog defaults are
applied here). Every refusal is a ToolError with a stable code, raised before anything changes.
Mutations (managed roots only) go through `boundary.gates` in their fixed order and are written
by `boundary.atomic`.
"""
