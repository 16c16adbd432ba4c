"""``python -m nmt.plot_attention``: a PNG heatmap of one translation's cross-attention."""

import struct
from contextlib import nullcontext
from pathlib import Path

import pytest
from fixture_model import fixture_pairs

from nmt.plot_attention import installed_hangul_fonts, main, plot_attention
from nmt.translator import Attention

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG header, checking that the file is a PNG at all."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def uniform_attention(sources: int, targets: int) -> Attention:
    return Attention([f"s{i}" for i in range(sources)], [f"t{i}" for i in range(targets)], [[1 / sources] * sources] * targets)


def test_command_writes_a_heatmap_of_the_translation(fixture_model_dir, tmp_path, capsys):
    korean, english = fixture_pairs()[0]
    out = tmp_path / "attention.png"
    args = ["--model", str(fixture_model_dir), "--source-lang", "ko", "--target-lang", "en", "--text", korean, "--out", str(out), "--device", "cpu"]
    with pytest.warns(UserWarning, match="no Hangul font") if not installed_hangul_fonts() else nullcontext():
        assert main(args) == 0
    assert capsys.readouterr().out == english + "\n"
    width, height = png_size(out)
    assert width > 200 and height > 200
    assert out.stat().st_size > 5_000


def test_source_tokens_run_along_x_and_target_tokens_down_y(tmp_path):
    wide = png_size(plot_attention(uniform_attention(sources=12, targets=2), tmp_path / "wide.png"))
    tall = png_size(plot_attention(uniform_attention(sources=2, targets=12), tmp_path / "tall.png"))
    assert wide[0] > wide[1] and tall[1] > tall[0]


def test_empty_text_is_an_error(fixture_model_dir, tmp_path, capsys):
    out = tmp_path / "attention.png"
    args = ["--model", str(fixture_model_dir), "--source-lang", "ko", "--target-lang", "en", "--text", " ", "--out", str(out), "--device", "cpu"]
    assert main(args) == 2
    assert "the text is empty" in capsys.readouterr().err
    assert not out.exists()
