"""The one level measurement: a frame's mean square, read from the frame's own buffer."""

from __future__ import annotations

import numpy as np
import pytest
from livekit import rtc

from resilient_agent import frame_mean_square


def test_the_mean_square_of_a_frame_is_that_of_its_samples() -> None:
    samples = np.array([3, -4, 0, 32767, -32768], dtype=np.int16)
    frame = rtc.AudioFrame(samples.tobytes(), 16000, 1, len(samples))
    expected = float(np.mean(samples.astype(np.float64) ** 2))
    assert frame_mean_square(frame) == pytest.approx(expected, rel=1e-6)


def test_a_frame_made_from_a_memoryview_is_measured_alike() -> None:
    samples = np.full(160, 300, dtype=np.int16)
    frame = rtc.AudioFrame(memoryview(samples.tobytes()), 16000, 1, len(samples))
    assert frame_mean_square(frame) == pytest.approx(300.0**2)


def test_a_frame_without_samples_has_no_level() -> None:
    frame = rtc.AudioFrame(b"", 16000, 1, 0)
    assert frame_mean_square(frame) is None


def test_silence_is_level_zero() -> None:
    frame = rtc.AudioFrame.create(16000, 1, 160)
    assert frame_mean_square(frame) == 0.0
