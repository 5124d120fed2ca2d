"""`fit_line`: the live progress line fits any width and gives up parts before it cuts ``loss``."""
from __future__ import annotations

import pytest

from distrib.callbacks.progress_format import fit_line

LOGS = {"accuracy": 0.83, "loss": 0.54, "val_accuracy": 0.8, "val_loss": 0.6}


@pytest.mark.parametrize("width", range(20, 140))
def test_every_width_fits_and_keeps_loss(width):
    line = fit_line(" 7/70", 0.1, " 1:15", " 28ms/step", LOGS, width)
    assert len(line) <= width and " - loss: 0.5400" in line and line.startswith(" 7/70")


def test_parts_go_in_order_step_time_half_bar_metrics_bar_time():
    full = fit_line("70/70", 1.0, " 2s", " 28ms/step", LOGS, 500)
    assert full == ("70/70 " + "━" * 20 + " 2s 28ms/step - accuracy: 0.8300 - loss: 0.5400"
                    " - val_accuracy: 0.8000 - val_loss: 0.6000")
    widths = sorted({len(fit_line("70/70", 1.0, " 2s", " 28ms/step", LOGS, w)) for w in range(20, 120)})
    lines = [fit_line("70/70", 1.0, " 2s", " 28ms/step", LOGS, w) for w in reversed(widths)]
    assert lines[1] == full.replace(" 28ms/step", "")
    assert lines[2] == lines[1].replace("━" * 20, "━" * 10)
    assert "val_accuracy" not in lines[3] and "val_loss" in lines[3]
    assert lines[-2] == "70/70 2s - loss: 0.5400" and lines[-1] == "70/70 - loss: 0.5400"


def test_too_narrow_for_count_and_loss_is_cut_not_wrapped():
    assert fit_line("70/70", 1.0, " 2s", "", {"loss": 0.5}, 12) == "70/70 - loss"


def test_without_a_target_there_is_no_bar():
    assert fit_line("      7/Unknown", None, " 3s", " 1s/step", {"loss": 1.0}, 80) == \
        "      7/Unknown 3s 1s/step - loss: 1.0000"
