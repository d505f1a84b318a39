"""Deterministic test pictures and their data URLs for the vision engine tests."""

from __future__ import annotations

import base64
import io
import random
from typing import Any


def image(seed: int, sizes: tuple[int, int] = (24, 80)) -> Any:
    """A few coloured rectangles on a background; width and height drawn from ``sizes``."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    size = (rng.randint(*sizes), rng.randint(*sizes))
    picture = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(picture)
    for _ in range(3):
        x0, y0 = rng.randrange(size[0]), rng.randrange(size[1])
        box = (x0, y0, x0 + rng.randint(4, 30), y0 + rng.randint(4, 30))
        draw.rectangle(box, fill=tuple(rng.randrange(256) for _ in range(3)))
    return picture


def data_url(picture: Any) -> str:
    buf = io.BytesIO()
    picture.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
