"""herdr_skill and the internal herdr_mcp.skill.* methods: the planner policy, progressively.

The global guide is small enough to read once per conversation; modules are loaded on demand
through herdr_call so the public catalog stays at 18 tools. Texts are packaged markdown files
under `herdr_mcp/runtime/skills/`: the first heading is the title, the next line the summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from herdr_mcp.errors import ToolError

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services

GLOBAL_GUIDE = "global"


@dataclass(frozen=True)
class SkillModule:
    name: str
    title: str
    summary: str
    text: str

    @property
    def sections(self) -> list[str]:
        return [line[3:].strip() for line in self.text.splitlines() if line.startswith("## ")]


@cache
def _modules() -> dict[str, SkillModule]:
    found = {}
    for entry in resources.files("herdr_mcp.runtime.skills").iterdir():
        if not entry.name.endswith(".md"):
            continue
        text = entry.read_text(encoding="utf-8")
        lines = text.splitlines()
        name = entry.name[: -len(".md")]
        found[name] = SkillModule(
            name=name,
            title=lines[0].lstrip("# ").strip(),
            summary=lines[1].strip() if len(lines) > 1 else "",
            text=text,
        )
    return found


def module(name: str) -> SkillModule:
    modules = _modules()
    if name not in modules or name == GLOBAL_GUIDE:
        available = sorted(n for n in modules if n != GLOBAL_GUIDE)
        raise ToolError("skill_module_not_found", f"no skill module {name!r}", available=available)
    return modules[name]


def module_list() -> list[dict[str, Any]]:
    return [
        {"module": m.name, "title": m.title, "summary": m.summary, "bytes": len(m.text.encode())}
        for m in sorted(_modules().values(), key=lambda m: m.name)
        if m.name != GLOBAL_GUIDE
    ]


async def skill(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "guide": _modules()[GLOBAL_GUIDE].text,
        "modules": module_list(),
        "load_with": {"tool": "herdr_call", "method": "herdr_mcp.skill.load", "params": {"module": "<name>"}},
    }
    if args["include_native_reference"]:
        from herdr_mcp.runtime.tools.passthrough import method_index

        answer["native_methods"] = (await method_index(svc, None, native_only=True))["methods"]
    return answer


async def internal_list(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    return {"modules": module_list()}


async def internal_describe(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    found = module(params["module"])
    return {"module": found.name, "title": found.title, "summary": found.summary, "sections": found.sections}


async def internal_load(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    found = module(params["module"])
    return {"module": found.name, "title": found.title, "text": found.text}
