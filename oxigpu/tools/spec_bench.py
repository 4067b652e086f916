"""`oxigpu bench --draft-model FILE` / `--lookup`: speculative decoding against plain decoding, same prompts.

Twenty-one code-completion and code-editing requests (the work speculation is for: answers that repeat or
continue code already in the context; the last, ``EDIT_TASK``, asks for a whole module back with one name
changed), each sent through the model's chat template when it has one, greedy,
``n_gen`` tokens at most. For each prompt the same loaded model generates plain, then speculatively
(``LLM.speculate`` toggles it, so both sides share weights, plans and device), and the table reports
generation tokens/s of each (the tokens after the first over the time after the first: the prompt's cost is
the same for both and left out), the speed-up, the acceptance rate (accepted drafts / drafted), tokens per
round, and whether the greedy outputs are identical. One warm-up generation per side compiles everything
first.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PROMPTS = [
    "Complete this Python function:\n\ndef is_prime(n: int) -> bool:\n"
    "    \"\"\"Return True when n is a prime number.\"\"\"\n",
    "Rewrite this function to use a list comprehension:\n\ndef squares(xs):\n    out = []\n    for x in xs:\n"
    "        if x % 2 == 0:\n            out.append(x * x)\n    return out\n",
    "Add type hints to every function in this module:\n\nimport os\n\ndef read(path):\n    with open(path) as f:\n"
    "        return f.read()\n\ndef write(path, text):\n    with open(path, 'w') as f:\n        f.write(text)\n\n"
    "def exists(path):\n    return os.path.exists(path)\n",
    "Rename the variable `tmp` to `total` in this code and return the whole code:\n\ndef add_all(values):\n"
    "    tmp = 0\n    for v in values:\n        tmp += v\n    print('sum', tmp)\n    return tmp\n",
    "Write a Python class `Stack` with push, pop, peek and __len__, with docstrings.",
    "Convert this JavaScript to TypeScript with explicit types:\n\nfunction greet(name, times) {\n"
    "  let out = [];\n  for (let i = 0; i < times; i++) {\n    out.push('Hello, ' + name);\n  }\n"
    "  return out.join('\\n');\n}\n",
    "Fix the bug in this function and return the corrected code:\n\ndef average(xs):\n    total = 0\n"
    "    for x in xs:\n        total += x\n    return total / len(xs) - 1\n",
    "Write a SQL query that returns the ten customers with the highest total order amount from tables "
    "customers(id, name) and orders(id, customer_id, amount).",
    "Add a docstring to each method of this class and return the whole class:\n\nclass Account:\n"
    "    def __init__(self, owner, balance=0):\n        self.owner = owner\n        self.balance = balance\n\n"
    "    def deposit(self, amount):\n        self.balance += amount\n\n    def withdraw(self, amount):\n"
    "        if amount > self.balance:\n            raise ValueError('insufficient funds')\n"
    "        self.balance -= amount\n",
    "Write a bash script that counts the lines of every .py file in the current directory tree and prints "
    "the total.",
    "Complete this Rust function:\n\nfn fibonacci(n: u64) -> u64 {\n",
    "Refactor this code to remove the duplication and return the new code:\n\ndef area_square(s):\n"
    "    print('computing area')\n    return s * s\n\ndef area_rect(w, h):\n    print('computing area')\n"
    "    return w * h\n\ndef area_triangle(b, h):\n    print('computing area')\n    return b * h / 2\n",
    "Write unit tests with pytest for this function:\n\ndef clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    "Translate this Python to Go:\n\ndef word_counts(text):\n    counts = {}\n    for word in text.split():\n"
    "        counts[word] = counts.get(word, 0) + 1\n    return counts\n",
    "Add error handling for a missing file to this function and return the whole function:\n\n"
    "def load_config(path):\n    import json\n    with open(path) as f:\n        return json.load(f)\n",
    "Write a Python function that parses an ISO 8601 date string like 2024-03-15 into a (year, month, day) "
    "tuple without using datetime.",
    "Change this loop to iterate with enumerate and return the code:\n\nnames = ['a', 'b', 'c']\n"
    "for i in range(len(names)):\n    print(i, names[i])\n",
    "Write a C function that reverses a null-terminated string in place.",
    "Convert this class to a Python dataclass and return it:\n\nclass Point:\n    def __init__(self, x, y, z):\n"
    "        self.x = x\n        self.y = y\n        self.z = z\n\n    def __repr__(self):\n"
    "        return f'Point({self.x}, {self.y}, {self.z})'\n",
    "Complete this HTML page with a form that has name and email fields and a submit button:\n\n"
    "<!DOCTYPE html>\n<html>\n<head>\n  <title>Sign up</title>\n</head>\n<body>\n",
    # an editing task whose answer is nearly the whole prompt (what prompt lookup is for; llama.cpp's and
    # vLLM's n-gram speculation are measured on such requests)
    "Rename the function `process_items` to `select_active` everywhere in this module and return the whole "
    "module, with no explanation:\n\nimport json\nfrom pathlib import Path\n\n\ndef load_items(path):\n"
    "    with open(path) as f:\n        return json.load(f)\n\n\ndef process_items(items, limit=None):\n"
    "    out = []\n    for item in items:\n        if limit is not None and len(out) >= limit:\n"
    "            break\n        if item.get(\"active\"):\n"
    "            out.append({\"id\": item[\"id\"], \"name\": item[\"name\"].strip()})\n    return out\n\n\n"
    "def save_items(items, path):\n    Path(path).write_text(json.dumps(items, indent=2))\n\n\n"
    "def main(src, dst, limit=None):\n    items = load_items(src)\n    kept = process_items(items, limit)\n"
    "    save_items(kept, dst)\n    print(f\"kept {len(kept)} of {len(items)} items\")\n",
]
EDIT_TASK = len(PROMPTS) - 1
"""The prompt whose answer repeats the prompt's code (issue-level target: prompt lookup >= 1.5x there)."""


def prompt_ids(llm: Any, text: str) -> list[int]:
    """``text`` as a user turn through the model's chat template, or as it is for a model without one."""
    if llm.tokenizer.chat_template is not None:
        return llm.chat_prompt([{"role": "user", "content": text}])
    return llm.tokenize(text)


def run_spec_bench(model: Path, draft: Path | None, speculative: dict[str, Any], n_gen: int = 128,
                   backend: str = "auto", n_ctx: int | None = None, n_prompts: int = len(PROMPTS),
                   dump_prompts: Path | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Plain and speculative greedy generation of each prompt (module docstring); a JSON-ready dict."""
    from ..api import LLM
    llm = LLM(model, backend=backend, n_ctx=n_ctx or 2048)
    draft_llm = None
    if draft is not None:
        draft_llm = LLM(draft, backend=llm.backend, n_ctx=llm.n_ctx, max_seqs=1)
    log(f"  loaded {model.name}{f' and draft {draft.name}' if draft else ''} on {llm.backend}")
    prompts = PROMPTS[:n_prompts]
    ids = [prompt_ids(llm, p) for p in prompts]
    if dump_prompts is not None:      # the same prompts as text files, for llama.cpp's tools
        dump_prompts.mkdir(parents=True, exist_ok=True)
        for i, x in enumerate(ids):
            (dump_prompts / f"prompt{i:02d}.txt").write_text(llm.detokenize(x), encoding="utf-8")
    params = {"temperature": 0.0, "max_tokens": n_gen}

    def side(spec: bool, x: list[int]) -> tuple[Any, dict[str, float] | None]:
        # each side computes the prompt from nothing: with the other side's blocks from the prefix cache it
        # would prefill only the prompt's tail, in a chunk of other rows whose sums may take another kernel
        llm.engine.forget()
        if spec:
            llm.speculate(draft_llm, speculative)
        else:
            llm.speculate()
        return llm.generate(x, **params), llm.speculative_stats

    for spec in (False, True):       # warm-up: plans compiled, weights resident
        side(spec, ids[0])
    rows = []
    for i, x in enumerate(ids):
        plain, _ = side(False, x)
        fast, st = side(True, x)
        assert st is not None
        row = {"prompt": i, "prompt_tokens": len(x), "tokens": len(fast.token_ids),
               "plain_tok_s": _rate(plain), "spec_tok_s": _rate(fast),
               "identical": plain.token_ids == fast.token_ids,
               "cached_tokens": [plain.timings.cached_tokens, fast.timings.cached_tokens], **{k: st[k] for k in (
                   "drafted", "accepted", "rounds", "plain_steps", "acceptance_rate", "tokens_per_round")}}
        row["speedup"] = round(row["spec_tok_s"] / row["plain_tok_s"], 3) if row["plain_tok_s"] else 0.0
        if not row["identical"]:
            row |= _divergence(llm, x, plain.token_ids, fast.token_ids)
        rounds = max(1, st["rounds"])      # where a round's time goes: drafting, and verifying k + 1 rows
        row["draft_ms_per_round"] = round(1000 * st["draft_s"] / rounds, 3)
        row["verify_ms_per_round"] = round(1000 * st["verify_s"] / rounds, 3)
        rows.append(row)
        log(f"  prompt {i:2d}: plain {row['plain_tok_s']:8.1f} tok/s, speculative {row['spec_tok_s']:8.1f} tok/s "
            f"(x{row['speedup']:.2f}), accepted {row['accepted']}/{row['drafted']}, {_same(row)}")
    llm.speculate()

    def total(key: str) -> float:
        gen = [(r["tokens"] - 1, (r["tokens"] - 1) / r[key]) for r in rows if r[key] > 0 and r["tokens"] > 1]
        return round(sum(n for n, _ in gen) / sum(t for _, t in gen), 2) if gen else 0.0

    drafted = sum(r["drafted"] for r in rows)
    accepted = sum(r["accepted"] for r in rows)
    summary = {"plain_tok_s": total("plain_tok_s"), "spec_tok_s": total("spec_tok_s"),
               "acceptance_rate": round(accepted / drafted, 4) if drafted else 0.0,
               "tokens_per_round": round(sum(r["accepted"] + r["rounds"] for r in rows)
                                         / max(1, sum(r["rounds"] for r in rows)), 3),
               "identical": sum(r["identical"] for r in rows), "prompts": len(rows),
               "draft_ms_per_round": round(sum(r["draft_ms_per_round"] * r["rounds"] for r in rows)
                                           / max(1, sum(r["rounds"] for r in rows)), 3),
               "verify_ms_per_round": round(sum(r["verify_ms_per_round"] * r["rounds"] for r in rows)
                                            / max(1, sum(r["rounds"] for r in rows)), 3)}
    gaps = [abs(r["logit_gap"]) for r in rows if r.get("logit_gap") is not None]
    summary["max_logit_gap"] = max(gaps) if gaps else None     # where outputs differ: the widest lead lost
    summary["speedup"] = round(summary["spec_tok_s"] / summary["plain_tok_s"], 3) if summary["plain_tok_s"] else 0.0
    return {"model": model.name, "draft": draft.name if draft else None, "speculative": speculative,
            "backend": llm.backend, "n_gen": n_gen, "rows": rows, "summary": summary}


def _divergence(llm: Any, prompt: list[int], plain: list[int], spec: list[int]) -> dict[str, Any]:
    """Where speculative output left the plain one, and by how much the plain choice led the speculative one
    there in the model's teacher-forced logits: a near-tie (the verification's k + 1-row step sums in
    another order than a one-row step) or a real difference."""
    i = next((j for j, (a, b) in enumerate(zip(plain, spec)) if a != b), min(len(plain), len(spec)))
    if i >= min(len(plain), len(spec)):
        return {"diverged_at": i, "logit_gap": None}      # one output is the other's prefix (a stop)
    logits = np.asarray(llm.logits(prompt + plain[:i]))[-1]
    return {"diverged_at": i, "logit_gap": round(float(logits[plain[i]] - logits[spec[i]]), 5)}


def _parted(row: dict[str, Any]) -> str:
    """Where a differing prompt's outputs part: its token, and the logit gap there when known."""
    gap = row.get("logit_gap")
    return f"from token {row.get('diverged_at')}" + (f" (logit gap {gap:.4f})" if gap is not None else "")


def _same(row: dict[str, Any]) -> str:
    return "identical" if row["identical"] else f"DIFFERENT {_parted(row)}"


def _rate(result: Any) -> float:
    t = result.timings
    n = t.generated_tokens - 1
    return round(n / t.generation_s, 2) if n > 0 and t.generation_s > 0 else 0.0


def to_markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    how = f"draft model {result['draft']}" if result["draft"] else "prompt lookup"
    lines = [f"speculative decoding ({how}, {json.dumps(result['speculative'])}) on {result['model']}, "
             f"{result['backend']}, greedy, {result['n_gen']} tokens per prompt", "",
             "| prompt | tokens | plain tok/s | spec tok/s | speed-up | accepted/drafted | tokens/round | identical |",
             "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['prompt']} | {r['tokens']} | {r['plain_tok_s']:.1f} | {r['spec_tok_s']:.1f} | "
                     f"{r['speedup']:.2f} | {r['accepted']}/{r['drafted']} | {r['tokens_per_round']:.2f} | "
                     f"{'yes' if r['identical'] else 'NO: ' + _parted(r)} |")
    lines += ["", f"all prompts: plain {s['plain_tok_s']:.1f} tok/s, speculative {s['spec_tok_s']:.1f} tok/s, "
                  f"speed-up x{s['speedup']:.2f}, acceptance {100 * s['acceptance_rate']:.1f} %, "
                  f"{s['tokens_per_round']:.2f} tokens per round ({s['draft_ms_per_round']:.2f} ms drafting, "
                  f"{s['verify_ms_per_round']:.2f} ms verifying), {s['identical']}/{s['prompts']} identical"
                  + (f" (the others part where the two tokens' logits lie within {s['max_logit_gap']:.4f})"
                     if s.get("max_logit_gap") is not None else "")]
    return "\n".join(lines) + "\n"
