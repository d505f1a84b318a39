"""Host-sampling fallback: host-only sampling features are honoured, and they do not disturb the
device-sampled requests that share their batch.

Promises, for each feature the TT device sampler does not implement (min_p, logit_bias,
allowed_token_ids, min_tokens, bad_words, stop strings):
- the feature does what vLLM documents, alone and inside a batch of device-eligible requests:
  ``min_p=1`` keeps only the most likely token (= greedy); ``logit_bias`` +100 forces a token and
  -100 bans it; every token is inside ``allowed_token_ids``; no stop token before ``min_tokens``
  tokens; none of the token runs vLLM bans for a bad word; the text ends right before the first
  stop string;
- the greedy companions in that batch give exactly the tokens they give alone, although the
  plugin switches the whole batch to vLLM's host sampler while the feature request is live and
  back to device sampling afterwards.
Why: fallback is chosen per batch (README "host-side sampling path"), so every feature request
changes how its neighbours are sampled, and every switch reloads the device's resident inputs.
All ids come from the server's /tokenize and from greedy references taken at the start.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    Body,
    Output,
    achat,
    acomplete,
    body,
    capacity,
    complete_each,
    complete_sync,
    contains_run,
    describe_body,
    greedy,
    mismatches,
    token_ids_of,
)
from tt_conformance.ttmetrics import device_decode, host_fallback

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo
    from tt_conformance.ttmetrics import Claim
    from tt_conformance.ttpath import TTPath

pytestmark = pytest.mark.sampling_fallback

MAX_TOKENS = 16
COMPANION_TOKENS = 24
FEATURE_PROMPT = "Monday Tuesday Wednesday Thursday"
CHAT: list[Any] = [{"role": "user", "content": "Which day comes after Monday?"}]
MIN_TOKENS = 6

Call = Callable[[Any], Coroutine[Any, Any, Output]]  # (AsyncOpenAI) -> Output


@dataclass(frozen=True)
class Reference:
    """Greedy outputs taken once per module, before any feature is exercised."""

    model: str
    prompt_tokens: tuple[int, ...]  # greedy continuation of FEATURE_PROMPT (ignore_eos)
    prompt_text: str
    chat_tokens: tuple[int, ...]
    chat_text: str
    forced_token: int
    allowed: tuple[int, ...]
    banned_word: str
    banned_runs: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Feature:
    name: str
    call: Call
    verify: Callable[[Output], None]


@pytest.fixture(scope="module")
def reference(tt_server: ServerInfo, tt_openai_client: OpenAI, tt_raw_http: RawHttp) -> Reference:
    plain = complete_sync(
        tt_openai_client, tt_server.model, greedy(FEATURE_PROMPT, MAX_TOKENS, ignore_eos=True)
    )
    chat = tt_openai_client.chat.completions.create(
        model=tt_server.model,
        messages=CHAT,
        extra_body={"temperature": 0.0, "max_tokens": MAX_TOKENS, "return_token_ids": True},
    )
    raw_ids = getattr(chat.choices[0], "token_ids", None)
    assert raw_ids is not None, "the server returned no token_ids for a chat completion"
    chat_ids = tuple(int(t) for t in raw_ids)
    chat_text = chat.choices[0].message.content or ""
    word, runs = _bannable_word(tt_raw_http, chat_text, chat_ids)
    digits = sorted({t for t in token_ids_of(tt_raw_http, "0 1 2 3 4 5 6 7 8 9")})
    forced = token_ids_of(tt_raw_http, " hello")[0]
    return Reference(
        model=tt_server.model,
        prompt_tokens=plain.token_ids,
        prompt_text=plain.text,
        chat_tokens=chat_ids,
        chat_text=chat_text,
        forced_token=forced,
        allowed=tuple(digits),
        banned_word=word,
        banned_runs=runs,
    )


def banned_runs(tt_raw_http: RawHttp, word: str) -> tuple[tuple[int, ...], ...]:
    """The token runs vLLM bans for ``bad_words=[word]``: the word's own tokens, plus its
    space-prefixed tokens when those are as many and start differently (vLLM's rule, so a
    model may still write the word through another tokenization)."""
    bare = tuple(token_ids_of(tt_raw_http, word.lstrip()))
    spaced = tuple(token_ids_of(tt_raw_http, " " + word.lstrip()))
    if spaced and spaced[0] != bare[0] and len(spaced) == len(bare):
        return (bare, spaced)
    return (bare,)


def _bannable_word(
    tt_raw_http: RawHttp, text: str, ids: tuple[int, ...]
) -> tuple[str, tuple[tuple[int, ...], ...]]:
    """A word of the greedy chat answer one of whose banned runs occurs in the answer."""
    for word in re.findall(r"[A-Za-z]{2,}", text):
        runs = banned_runs(tt_raw_http, word)
        if any(contains_run(ids, run) for run in runs):
            return word, runs
    raise AssertionError(
        f"precondition: the greedy chat answer to {CHAT[0]['content']!r} has no word whose "
        f"banned tokens occur in it (answer {text!r}, tokens {list(ids)})"
    )


def _stop_string(text: str) -> str:
    """Three characters from the middle of the greedy text, not all whitespace."""
    for start in range(max(1, len(text) // 2), len(text) - 2):
        candidate = text[start : start + 3]
        if candidate.strip() and "\ufffd" not in candidate:
            return candidate
    raise AssertionError(f"precondition: greedy text {text!r} is too short for a stop string")


def features(ref: Reference) -> dict[str, Feature]:
    model = ref.model

    def completion(request: Body) -> Call:
        return lambda client: acomplete(client, model, request)

    def same_as_greedy(name: str) -> Callable[[Output], None]:
        def verify(out: Output) -> None:
            assert out.token_ids == ref.prompt_tokens, (
                f"{name}: expected the greedy tokens {list(ref.prompt_tokens)}, got "
                f"{out.describe()}"
            )

        return verify

    def forced(out: Output) -> None:
        assert out.token_ids and all(t == ref.forced_token for t in out.token_ids), (
            f"logit_bias +100 on token {ref.forced_token}: every token must be it, got "
            f"{out.describe()}"
        )

    banned = sorted(set(ref.prompt_tokens[:4]))

    def avoids_banned(out: Output) -> None:
        hit = sorted(set(out.token_ids) & set(banned))
        assert not hit, f"logit_bias -100 on {banned}: output still has {hit}: {out.describe()}"
        assert len(out.token_ids) == MAX_TOKENS, out.describe()

    def inside_allowed(out: Output) -> None:
        outside = sorted(set(out.token_ids) - set(ref.allowed))
        assert out.token_ids and not outside, (
            f"allowed_token_ids={list(ref.allowed)}: output has {outside}: {out.describe()}"
        )

    stop_id = ref.prompt_tokens[0]

    def respects_min_tokens(out: Output) -> None:
        assert len(out.token_ids) >= MIN_TOKENS, (
            f"min_tokens={MIN_TOKENS} with stop_token_ids=[{stop_id}]: stopped after "
            f"{len(out.token_ids)} tokens: {out.describe()}"
        )
        assert stop_id not in out.token_ids[:MIN_TOKENS], (
            f"stop token {stop_id} generated before min_tokens={MIN_TOKENS}: {out.describe()}"
        )

    stop = _stop_string(ref.prompt_text)
    expected_text = ref.prompt_text[: ref.prompt_text.find(stop)]

    def stops_at_string(out: Output) -> None:
        assert out.text == expected_text and out.finish_reason == "stop", (
            f"stop={[stop]!r}: expected text {expected_text!r} and finish 'stop' (greedy text "
            f"{ref.prompt_text!r}), got {out.text!r} / {out.finish_reason}"
        )

    def avoids_word(out: Output) -> None:
        found = [run for run in ref.banned_runs if contains_run(out.token_ids, run)]
        assert not found, (
            f"bad_words=[{ref.banned_word!r}]: output still contains token run(s) {found}: "
            f"{out.describe()}"
        )

    base = {"prompt": FEATURE_PROMPT, "max_tokens": MAX_TOKENS, "ignore_eos": True}
    return {
        f.name: f
        for f in (
            Feature(
                "min_p",
                completion({**base, "temperature": 1.0, "seed": 3, "min_p": 1.0}),
                same_as_greedy("min_p=1.0"),
            ),
            Feature(
                "logit_bias_force",
                completion(
                    {**base, "temperature": 0.0, "logit_bias": {str(ref.forced_token): 100}}
                ),
                forced,
            ),
            Feature(
                "logit_bias_ban",
                completion(
                    {**base, "temperature": 0.0, "logit_bias": {str(t): -100 for t in banned}}
                ),
                avoids_banned,
            ),
            Feature(
                "allowed_token_ids",
                completion(
                    {**base, "temperature": 1.0, "seed": 5, "allowed_token_ids": list(ref.allowed)}
                ),
                inside_allowed,
            ),
            Feature(
                "min_tokens",
                completion(
                    {
                        "prompt": FEATURE_PROMPT,
                        "max_tokens": MIN_TOKENS + 4,
                        "temperature": 0.0,
                        "stop_token_ids": [stop_id],
                        "min_tokens": MIN_TOKENS,
                    }
                ),
                respects_min_tokens,
            ),
            Feature(
                "stop_string",
                completion({**base, "temperature": 0.0, "stop": [stop]}),
                stops_at_string,
            ),
            Feature(
                "bad_words",
                lambda client: achat(
                    client,
                    model,
                    CHAT,
                    {"temperature": 0.0, "max_tokens": MAX_TOKENS, "bad_words": [ref.banned_word]},
                ),
                avoids_word,
            ),
        )
    }


# The reason the plugin gives (tt_host_fallback_steps_total{reason}) when a feature moves the
# batch to the host sampler; stop strings are applied by vLLM's detokenizer, on any route.
FALLBACK_REASON: dict[str, str | None] = {
    "min_p": "min_p",
    "logit_bias_force": "logit_bias",
    "logit_bias_ban": "logit_bias",
    "allowed_token_ids": "allowed_token_ids",
    "min_tokens": "min_tokens",
    "stop_string": None,
    "bad_words": "bad_words",
}


def device_batch_claims(names: list[str]) -> list[Claim]:
    """Companions decode on the device; the feature requests move the batch to the host."""
    reasons = sorted({r for n in names if (r := FALLBACK_REASON[n]) is not None})
    return [device_decode(), *([host_fallback(reasons)] if reasons else [])]


FEATURES = (
    "min_p",
    "logit_bias_force",
    "logit_bias_ban",
    "allowed_token_ids",
    "min_tokens",
    "stop_string",
    "bad_words",
)
# While an allowed_token_ids request is live, a stale mask row in the host sampler's batch can
# restrict an unrelated request (see the expectations for the emulated baseline). Checks that
# send one run alone, so that only their own requests can be hit and the failure stays theirs.
EXCLUSIVE = pytest.mark.xdist_group("exclusive")
FEATURE_PARAMS = [
    pytest.param(name, marks=EXCLUSIVE) if name == "allowed_token_ids" else name
    for name in FEATURES
]


def companions(count: int) -> list[Body]:
    return [
        greedy(PLAIN_PROMPTS[i % len(PLAIN_PROMPTS)], COMPANION_TOKENS, ignore_eos=True)
        for i in range(count)
    ]


def run_mixed(
    client: AsyncOpenAI, model: str, calls: list[Call], others: list[Body]
) -> tuple[list[Output], list[Output]]:
    """Feature calls and greedy companions at once; companions are sent first and so are
    already decoding on the device when the feature requests join."""

    async def run() -> tuple[list[Output], list[Output]]:
        mates = [asyncio.ensure_future(acomplete(client, model, r)) for r in others]
        feats = [asyncio.ensure_future(call(client)) for call in calls]
        return list(await asyncio.gather(*feats)), list(await asyncio.gather(*mates))

    return asyncio.run(run())


@pytest.mark.parametrize("name", FEATURE_PARAMS)
def test_feature_alone(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, reference: Reference, name: str
) -> None:
    feature = features(reference)[name]
    out = asyncio.run(feature.call(tt_async_openai_client))
    feature.verify(out)


# Exclusive: a neighbour check's host-only request in the same batch would name its own feature
# as the batch's fallback reason (the route records the first one), hiding this one's.
@EXCLUSIVE
@pytest.mark.tt_path
@pytest.mark.parametrize("name", FEATURE_PARAMS)
def test_feature_in_device_batch(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    reference: Reference,
    tt_path: TTPath,
    name: str,
) -> None:
    feature = features(reference)[name]
    others = companions(max(1, capacity(tt_server) - 1))
    solo = complete_each(tt_async_openai_client, tt_server.model, others)
    tt_path.start()
    (out,), mates = run_mixed(tt_async_openai_client, tt_server.model, [feature.call], others)
    feature.verify(out)
    labels = [f"greedy companion {r['prompt']!r}" for r in others]
    problems = mismatches(labels, solo, mates)
    assert not problems, (
        f"device-eligible companions changed output next to a {name} request:\n"
        + "\n".join(problems)
    )
    tt_path.conclude(*device_batch_claims([name]))


@pytest.mark.tt_path
@pytest.mark.xdist_group("exclusive")
def test_all_features_in_one_batch(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    reference: Reference,
    tt_path: TTPath,
) -> None:
    table = features(reference)
    others = companions(max(1, capacity(tt_server) - len(table)))
    solo = complete_each(tt_async_openai_client, tt_server.model, others)
    tt_path.start()
    outs, mates = run_mixed(
        tt_async_openai_client, tt_server.model, [f.call for f in table.values()], others
    )
    for feature, out in zip(table.values(), outs, strict=True):
        feature.verify(out)
    problems = mismatches([f"greedy companion {r['prompt']!r}" for r in others], solo, mates)
    assert not problems, "companions changed output next to every feature:\n" + "\n".join(problems)
    tt_path.conclude(*device_batch_claims(list(table)))


def test_min_tokens_precondition(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, reference: Reference
) -> None:
    """Without min_tokens the same request stops at once: the min_tokens check is meaningful."""
    stop_id = reference.prompt_tokens[0]
    out = complete_each(
        tt_async_openai_client,
        tt_server.model,
        [body(FEATURE_PROMPT, MIN_TOKENS + 4, temperature=0.0, stop_token_ids=[stop_id])],
    )[0]
    assert out.finish_reason == "stop" and len(out.token_ids) <= 1, (
        f"stop_token_ids=[{stop_id}] (the greedy first token) should stop at once: {out.describe()}"
    )


@pytest.mark.tt_path
@pytest.mark.xdist_group("exclusive")  # solo runs must not meet another check's host requests
@pytest.mark.parametrize("name", ["min_p", "logit_bias_ban"])
def test_seeded_companion_keeps_its_tokens(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    reference: Reference,
    tt_path: TTPath,
    name: str,
) -> None:
    """A seeded sampled companion (device-eligible) gives its solo tokens next to a host-only
    request: a seed must reproduce whatever else the batch holds, so the host path has to draw
    what the device would have drawn."""
    feature = features(reference)[name]
    seeded = [
        {"prompt": PLAIN_PROMPTS[7], "max_tokens": COMPANION_TOKENS, "temperature": 1.0,
         "seed": 2024, "ignore_eos": True},
        {"prompt": PLAIN_PROMPTS[0], "max_tokens": COMPANION_TOKENS, "temperature": 0.7,
         "top_k": 20, "seed": 7, "ignore_eos": True},
    ]  # fmt: skip
    solo = complete_each(tt_async_openai_client, tt_server.model, seeded)
    tt_path.start()
    (out,), mates = run_mixed(tt_async_openai_client, tt_server.model, [feature.call], seeded)
    feature.verify(out)
    problems = mismatches([f"seeded companion {describe_body(r)}" for r in seeded], solo, mates)
    assert not problems, (
        f"seeded companions changed output next to a {name} request (host sampling for the "
        "batch):\n" + "\n".join(problems)
    )
    tt_path.conclude(*device_batch_claims([name]))
