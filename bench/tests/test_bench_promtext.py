"""Unit tests of reading kube-apiserver's request counters by verb and resource."""

from __future__ import annotations

import pytest
from benchlib.promtext import Scrape, apiserver_requests, per_unit, request_delta, writes


def _line(verb: str, resource: str, code: str, value: int, subresource: str = "") -> str:
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="agents.x-k8s.io",'
        f'resource="{resource}",scope="resource",subresource="{subresource}",verb="{verb}",'
        'version="v1alpha1"'
    )
    return f"apiserver_request_total{{{labels}}} {value}\n"


PAGE = (
    "# HELP apiserver_request_total [STABLE] Counter of apiserver requests\n"
    "# TYPE apiserver_request_total counter\n"
    + _line("POST", "sandboxes", "201", 7)
    + _line("POST", "sandboxes", "409", 2)
    + _line("PATCH", "sandboxes", "200", 5, subresource="status")
    + _line("LIST", "pods", "200", 3)
    + _line("GET", "", "200", 11)
    + "# HELP other_total something else\n"
    "# TYPE other_total counter\n"
    'other_total{verb="POST",resource="sandboxes"} 100\n'
)


def test_requests_sum_codes_per_verb_and_resource_with_subresource() -> None:
    requests = apiserver_requests(Scrape(PAGE))
    assert requests == {
        ("POST", "sandboxes"): 9.0,
        ("PATCH", "sandboxes/status"): 5.0,
        ("LIST", "pods"): 3.0,
        ("GET", ""): 11.0,
    }


def test_one_code_is_still_readable_from_the_scrape() -> None:
    page = Scrape(PAGE)
    created = page.total("apiserver_request_total", verb="POST", resource="sandboxes", code="201")
    assert created == 7.0


def test_delta_drops_unchanged_keys_and_survives_a_server_restart() -> None:
    before = {("POST", "sandboxes"): 9.0, ("LIST", "pods"): 3.0, ("GET", ""): 11.0}
    after = {("POST", "sandboxes"): 12.0, ("LIST", "pods"): 3.0, ("GET", ""): 2.0}
    # GET went down: the server restarted, and its whole count since then is the delta.
    assert request_delta(after, before) == {("POST", "sandboxes"): 3.0, ("GET", ""): 2.0}


def test_writes_count_only_mutating_verbs() -> None:
    requests = apiserver_requests(Scrape(PAGE))
    assert writes(requests) == 14.0


def test_per_unit_is_keyed_by_verb_and_resource_largest_first() -> None:
    delta = {("POST", "sandboxes"): 10.0, ("PATCH", "sandboxes/status"): 30.0, ("GET", ""): 5.0}
    assert list(per_unit(delta, 10).items()) == [
        ("PATCH sandboxes/status", 3.0),
        ("POST sandboxes", 1.0),
        ("GET", 0.5),
    ]
    assert per_unit(delta, 0) == {}


def test_a_page_that_is_not_prometheus_text_is_refused() -> None:
    with pytest.raises(ValueError, match="could not convert"):
        Scrape("apiserver_request_total{verb= 3\n")
