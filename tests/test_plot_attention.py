"""``python -m nmt.plot_attention``: a PNG heatmap of one of a translation's attention maps."""

import struct
from pathlib import Path

import pytest
from fixture_model import fixture_pairs

from nmt.plot_attention import main, plot_attention
from nmt.translator import Attention

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG header, checking that the file is a PNG at all."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def uniform_attention(sources: int, targets: int) -> Attention:
    return Attention([f"s{i}" for i in range(sources)], [f"t{i}" for i in range(targets)], [[1 / sources] * sources] * targets)


def command(model_dir: Path, text: str, out: Path, *choices: str) -> list[str]:
    return ["--model", str(model_dir), "--source-lang", "ko", "--target-lang", "en", "--text", text, "--out", str(out),
            "--device", "cpu", *choices]


def test_command_writes_a_heatmap_of_the_translation(fixture_model_dir, tmp_path, capsys):
    korean, english = fixture_pairs()[0]
    out = tmp_path / "attention.png"
    assert main(command(fixture_model_dir, korean, out)) == 0
    assert capsys.readouterr().out == english + "\n"
    width, height = png_size(out)
    assert width > 200 and height > 200
    assert out.stat().st_size > 5_000


def test_kind_layer_and_head_choose_the_map(fixture_model_dir, tmp_path, capsys):
    korean, _ = fixture_pairs()[0]
    pictures = {}
    for name, choices in {"cross": [], "encoder": ["--kind", "encoder", "--layer", "0", "--head", "1"],
                          "decoder": ["--kind", "decoder", "--head", "mean"]}.items():
        pictures[name] = tmp_path / f"{name}.png"
        assert main(command(fixture_model_dir, korean, pictures[name], *choices)) == 0
    # The encoder map is source × source, the others have a row per target piece: the shapes differ.
    assert len({png_size(path) for path in pictures.values()}) == 3


@pytest.mark.parametrize("choices, message", [
    (["--layer", "5"], "layer must be between 0 and 1"),
    (["--head", "9"], "head must be between 0 and 3"),
])
def test_a_layer_or_head_the_model_lacks_is_an_error(fixture_model_dir, tmp_path, capsys, choices, message):
    korean, _ = fixture_pairs()[0]
    assert main(command(fixture_model_dir, korean, tmp_path / "a.png", *choices)) == 2
    assert message in capsys.readouterr().err


def test_head_must_be_a_number_or_mean(fixture_model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(command(fixture_model_dir, "x", tmp_path / "a.png", "--head", "all"))
    assert "expected a head number or 'mean'" in capsys.readouterr().err


def test_source_tokens_run_along_x_and_target_tokens_down_y(tmp_path):
    wide = png_size(plot_attention(uniform_attention(sources=12, targets=2), tmp_path / "wide.png"))
    tall = png_size(plot_attention(uniform_attention(sources=2, targets=12), tmp_path / "tall.png"))
    assert wide[0] > wide[1] and tall[1] > tall[0]


def test_empty_text_is_an_error(fixture_model_dir, tmp_path, capsys):
    out = tmp_path / "attention.png"
    assert main(command(fixture_model_dir, " ", out)) == 2
    assert "the text is empty" in capsys.readouterr().err
    assert not out.exists()
