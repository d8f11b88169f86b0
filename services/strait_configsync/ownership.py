"""What strait owns on a flow's target: config keys per remote topic and ACL bindings.

Ownership is what makes removal safe: strait deletes a config key or an ACL on the target only when
it owns it and the source no longer has it. It lives in Redis (``<ns>:configsync:owned:<flow>``),
written under the flow's lease so a replica that lost the flow cannot overwrite it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka.admin import AclBinding

from strait_configsync.acls import acl_from_key, acl_key


def owned_key(namespace: str, flow: str) -> str:
    """Redis key of a flow's ownership record."""
    return f"{namespace}:configsync:owned:{flow}"


@dataclass(frozen=True)
class Ownership:
    """Config keys strait owns per remote topic, and the target ACL bindings it owns."""

    configs: Mapping[str, frozenset[str]] = field(default_factory=dict)
    acls: frozenset[AclBinding] = frozenset()

    def encode(self) -> str:
        """The stored JSON."""
        return json.dumps({
            "configs": {topic: sorted(keys) for topic, keys in sorted(self.configs.items()) if keys},
            "acls": sorted(acl_key(binding) for binding in self.acls),
        }, sort_keys=True)

    @classmethod
    def decode(cls, body: bytes | str | None) -> Ownership:
        """An ownership record from its stored JSON (empty when there is none)."""
        if not body:
            return cls()
        data = json.loads(body)
        return cls({topic: frozenset(keys) for topic, keys in data.get("configs", {}).items()},
                   frozenset(acl_from_key(key) for key in data.get("acls", ())))
