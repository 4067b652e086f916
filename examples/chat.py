"""A two-turn conversation through the model's chat template; the second turn reuses the first's KV cache.

    python examples/chat.py [MODEL.gguf]
"""
import sys

from oxigpu import LLM


def main() -> None:
    llm = LLM(sys.argv[1] if len(sys.argv) > 1 else None)
    messages = [{"role": "system", "content": "You are a concise assistant."}]
    for question in ("What is 2+2?", "And times 3?"):
        messages.append({"role": "user", "content": question})
        reply = llm.chat(messages, max_tokens=48, temperature=0)
        messages.append({"role": "assistant", "content": reply.text})
        print(f"> {question}\n{reply.text}  ({reply.timings.cached_tokens} prompt tokens reused)")


if __name__ == "__main__":
    main()
