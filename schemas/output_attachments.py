"""What an attachment of a ``respond`` output may be, checked the same on both sides.

An output attachment is ``{"path": str, "altText"?: str}``: the bus carries the path,
never the bytes. ``altText`` is for images only (a platform renders it in place of
the image and for screen readers; on a document or an archive it would be silently
dropped), and is at most :data:`~schemas.limits.ALT_TEXT_CHARS` characters. Whether
the file exists is the client's check (the broker may not share its filesystem).
"""

from __future__ import annotations

from typing import Any

from .limits import ALT_TEXT_CHARS

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".svg", ".tif", ".tiff",
                  ".avif")
PATH_CHARS = 4096


def is_image(path: str) -> bool:
    """Whether ``path`` names an image, by its suffix (case-insensitive)."""
    return path.lower().endswith(IMAGE_SUFFIXES)


def attachment_problem(item: Any) -> str | None:
    """Why ``item`` is not an acceptable output attachment, as a sentence, or None."""
    if not isinstance(item, dict):
        return "an attachment must be an object with a path"
    unknown = sorted(str(k) for k in item if k not in ("path", "altText"))
    if unknown:
        return f"unknown field {unknown[0]!r} (an attachment has path and altText)"
    path = item.get("path")
    if not isinstance(path, str) or not path:
        return "path must be a non-empty string"
    if len(path) > PATH_CHARS:
        return f"path exceeds {PATH_CHARS} characters"
    if "altText" in item:
        alt = item["altText"]
        if not isinstance(alt, str):
            return "altText must be a string"
        if not is_image(path):
            return (f"altText is only for images ({', '.join(IMAGE_SUFFIXES)}); "
                    f"{path!r} is not one, and its altText would be dropped")
        if len(alt) > ALT_TEXT_CHARS:
            return f"altText exceeds {ALT_TEXT_CHARS} characters"
    return None
