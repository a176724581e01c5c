"""The app's structlog events reach LiveKit's JSON logs as fields."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog
from livekit.agents.cli.log import JsonFormatter

from logging_setup import configure_logging


@pytest.fixture
def app_logging(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    configure_logging()
    structlog.contextvars.bind_contextvars(room="room-1", job_id="AJ_1")
    with caplog.at_level(logging.INFO, logger="agent"):
        yield caplog
    structlog.contextvars.clear_contextvars()
    structlog.reset_defaults()


def test_fields_and_bound_ids_become_json_fields(app_logging: pytest.LogCaptureFixture) -> None:
    # "name" is a LogRecord attribute: it is renamed rather than making logging raise
    structlog.get_logger("agent").info("looking up weather", location="Paris", name="Ada")

    (record,) = app_logging.records
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "looking up weather"
    assert line["name"] == "agent"
    assert (line["location"], line["name_"]) == ("Paris", "Ada")
    assert (line["room"], line["job_id"]) == ("room-1", "AJ_1")
    # the call site is the app's code, not structlog's
    assert line["code.function.name"] == "test_fields_and_bound_ids_become_json_fields"


def test_exceptions_keep_their_traceback(app_logging: pytest.LogCaptureFixture) -> None:
    try:
        raise TimeoutError("weather service did not answer")
    except TimeoutError:
        structlog.get_logger("agent").exception("weather lookup failed")

    (record,) = app_logging.records
    assert record.exc_info is not None and record.exc_info[0] is TimeoutError
    line = json.loads(JsonFormatter().format(record))
    assert "weather service did not answer" in line["exc_info"]
