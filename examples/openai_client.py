"""Talk to oxigpu's server with the official OpenAI client: a chat answer, then a streamed completion.

    python examples/openai_client.py http://127.0.0.1:8080/v1    # a running `oxigpu serve` (OXIGPU_API_KEY if set)
    python examples/openai_client.py [MODEL.gguf]                 # or start a server on a model, here, first

Needs the server extra and the client: pip install 'oxigpu[server]' openai
"""
import contextlib
import os
import sys

from openai import OpenAI


@contextlib.contextmanager
def server_url(arg: str | None):
    """The API's base URL: the one given, or a server started in this process on a model file."""
    if arg and arg.startswith(("http://", "https://")):
        yield arg
        return
    from oxigpu.aio import AsyncLLM
    from oxigpu.server import BackgroundServer
    with BackgroundServer(lambda: AsyncLLM(arg, n_ctx=1024)) as server:   # 127.0.0.1, a free port
        yield server.base_url


def main() -> None:
    with server_url(sys.argv[1] if len(sys.argv) > 1 else None) as url:
        client = OpenAI(base_url=url, api_key=os.environ.get("OXIGPU_API_KEY", "none"))
        model = client.models.list().data[0].id
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Name three colours."}], max_tokens=32,
            temperature=0)
        print(f"[{model}] {reply.choices[0].message.content}")
        print(f"[{reply.usage.prompt_tokens} prompt + {reply.usage.completion_tokens} generated tokens]")
        stream = client.completions.create(model=model, prompt="Once upon a time", max_tokens=32, seed=1,
                                           stream=True)
        for chunk in stream:
            print(chunk.choices[0].text, end="", flush=True)
        print()


if __name__ == "__main__":
    main()
