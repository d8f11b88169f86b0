"""`strait dashboards push` against a real Grafana.

No Grafana server is available from Debian, PyPI or npm, so this runs only when one is given:
``STRAIT_TEST_GRAFANA_URL`` (plus ``GRAFANA_TOKEN`` or ``GRAFANA_USER``/``GRAFANA_PASSWORD``), a Grafana
whose strait dashboards are not file-provisioned. Elsewhere it is skipped with that reason.
"""

from __future__ import annotations

import json
import os

import pytest

from strait.dashboards import DATASOURCE_UID, all_dashboards
from tests.support.cli import strait

GRAFANA_URL = os.environ.get("STRAIT_TEST_GRAFANA_URL")


@pytest.mark.skipif(not GRAFANA_URL, reason="no Grafana to push to: set STRAIT_TEST_GRAFANA_URL (Grafana is not "
                                            "packaged on Debian, PyPI or npm)")
def test_push_installs_datasource_and_dashboards_twice_without_error() -> None:
    from grafana_client import GrafanaApi

    from strait.cli.dashboards import credential_from_env

    for attempt in range(2):  # the second push overwrites the first
        result = strait("dashboards", "push", "--grafana-url", str(GRAFANA_URL), "--json")
        assert result.returncode == 0, result.stderr
        pushed = json.loads(result.stdout)
        assert set(pushed["dashboards"]) == {d.uid for d in all_dashboards()}
        if attempt == 1:
            assert pushed["datasource"] in ("updated", "kept (provisioned)")
    api = GrafanaApi.from_url(str(GRAFANA_URL), credential=credential_from_env())
    assert api.datasource.get_datasource_by_uid(DATASOURCE_UID)["type"] == "prometheus"
    for dashboard in all_dashboards():
        stored = api.dashboard.get_dashboard(dashboard.uid)
        assert stored["dashboard"]["title"] == dashboard.title
        assert stored["meta"]["folderUid"] == "strait"
