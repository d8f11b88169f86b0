"""How a keeper brings Redis's configuration and its durable topic together (strait.config.durable.plan_sync)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from strait.config.durable import SyncAction, plan_sync, same_content
from strait.coord.documents import Document


def body(content: str, applied_at: str = "t0") -> bytes:
    return json.dumps({"format": 1, "source": "x.yaml", "applied_at": applied_at, "config": {"c": content}}).encode()


def doc(version: int, content: str, applied_at: str = "t0") -> Document:
    return Document("config", version, body(content, applied_at))


def test_nothing_anywhere_does_nothing() -> None:
    assert plan_sync(None, {}) == SyncAction()


def test_an_emptied_redis_gets_the_topics_newest_version_back_under_its_own_number() -> None:
    action = plan_sync(None, {1: body("a"), 2: body("b")})
    assert action == SyncAction(to_redis=doc(2, "b"))


def test_a_version_only_redis_holds_is_written_to_the_topic() -> None:
    assert plan_sync(doc(3, "c"), {1: body("a"), 2: body("b")}) == SyncAction(to_topic=doc(3, "c"))
    assert plan_sync(doc(1, "a"), {}) == SyncAction(to_topic=doc(1, "a"))


def test_in_step_when_both_hold_the_same_newest_content() -> None:
    assert plan_sync(doc(2, "b", applied_at="later"), {1: body("a"), 2: body("b")}) == SyncAction()


def test_a_redis_replica_that_was_behind_gets_the_newest_version() -> None:
    assert plan_sync(doc(1, "a"), {1: body("a"), 2: body("b")}) == SyncAction(to_redis=doc(2, "b"))


def test_an_apply_into_an_emptied_redis_wins_under_the_next_number() -> None:
    """Applied without the topic's floor: Redis numbered it 1 while the topic holds 1 and 2 (other content)."""
    action = plan_sync(doc(1, "new"), {1: body("a"), 2: body("b")})
    assert action == SyncAction(to_topic=doc(3, "new"), to_redis=doc(3, "new"))


def test_same_content_ignores_who_applied_it_and_when() -> None:
    assert same_content(body("a", "t1"), body("a", "t2"))
    assert not same_content(body("a"), body("b"))


contents = st.sampled_from(["a", "b", "c"])


@given(topic=st.dictionaries(st.integers(1, 8), contents, max_size=6),
       redis=st.none() | st.tuples(st.integers(1, 10), contents))
def test_versions_never_go_backwards_and_the_result_is_in_step(topic: dict[int, str],
                                                              redis: tuple[int, str] | None) -> None:
    in_topic = {v: body(c) for v, c in topic.items()}
    in_redis = doc(*redis) if redis else None
    action = plan_sync(in_redis, in_topic)
    after_topic = dict(in_topic)
    if action.to_topic is not None:
        assert action.to_topic.version not in in_topic or same_content(in_topic[action.to_topic.version],
                                                                        action.to_topic.body)
        after_topic[action.to_topic.version] = action.to_topic.body
    after_redis = in_redis
    if action.to_redis is not None:
        assert in_redis is None or action.to_redis.version > in_redis.version  # what restore accepts
        after_redis = action.to_redis
    newest_before = max([*in_topic, in_redis.version if in_redis else 0], default=0)
    if after_redis is None:
        assert not in_topic
        return
    assert after_redis.version >= newest_before
    assert max(after_topic) == after_redis.version
    assert same_content(after_topic[after_redis.version], after_redis.body)
    assert plan_sync(after_redis, after_topic) == SyncAction()  # one pass is enough
    if in_redis is not None and not (in_redis.version in in_topic
                                     and same_content(in_topic[in_redis.version], in_redis.body)):
        assert same_content(after_redis.body, in_redis.body)  # what Redis held that the topic did not wins
