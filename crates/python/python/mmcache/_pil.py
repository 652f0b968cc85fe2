"""PIL images over cached pixels, without a copy and read-only to their caller (a write
copies the image's pixels first): shared by the Dynamo drop-in and the engine integrations.

Pillow maps an image onto the cached pixels with ``Image.fromarrow`` (the Arrow export of
``Pixels``); such an image is read-only. Pillow's public writes (``putpixel``, ``paste``,
``ImageDraw``, ...) copy a read-only image first; the pixel access of ``load()`` and
``frombytes`` do not, and are wrapped here so that they do.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

from PIL import Image

from . import _native


class _PixelAccess:
    """What ``load()`` returns for a PIL image over cached pixels while they are shared: reads
    go through Pillow's own (read-only) pixel access, at its speed; the first write goes
    through the image's ``putpixel``, so it first copies the pixels (Pillow's copy-on-write of
    a read-only image) instead of failing as Pillow's read-only access would. Once the image
    has pixels of its own (by this access or by any other write: ``paste``, ``ImageDraw``),
    reads and writes use Pillow's access to them, so no read sees the pixels from before."""

    __slots__ = ("_image", "_core", "_access")

    def __init__(self, image: Image.Image, native: Any) -> None:
        self._image = image
        self._core = image.im
        self._access = native

    def _current(self) -> Any:
        image = self._image
        if image.im is not self._core:  # written since: Pillow's access to the new pixels
            self._core = image.im
            self._access = Image.Image.load(image)
        return self._access

    def __getitem__(self, xy: Any) -> Any:
        return self._current()[xy]

    def __setitem__(self, xy: Any, color: Any) -> None:
        if self._image.readonly:
            self._image.putpixel(xy, color)  # copies the shared pixels first
        else:
            self._current()[xy] = color

    getpixel = __getitem__
    putpixel = __setitem__


class _SharedLoad:
    """``image.load`` of a PIL image over cached pixels: Pillow's ``load``, except that while
    the pixels are shared (the image is read-only) the pixel access is a :class:`_PixelAccess`.
    It holds the image weakly: no reference cycle keeps the cached pixels alive."""

    __slots__ = ("_image",)

    def __init__(self, image: Image.Image) -> None:
        self._image = weakref.ref(image)

    def __call__(self) -> Any:
        image = self._image()
        if image is None:
            raise ReferenceError("the image of this load() is gone")
        access = Image.Image.load(image)
        if access is None or not image.readonly:
            return access  # after a write the image owns its pixels: Pillow's own access
        return _PixelAccess(image, access)


class _CopyFirst:
    """An image method that writes through the image's core past its read-only flag (Pillow's
    ``frombytes``): bound to an image over cached pixels, it first gives the image pixels of
    its own, as Pillow's other writes do. Holds the image weakly, as :class:`_SharedLoad`."""

    __slots__ = ("_image", "_method")

    def __init__(self, image: Image.Image, method: Any) -> None:
        self._image = weakref.ref(image)
        self._method = method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        image = self._image()
        if image is None:
            raise ReferenceError("the image of this method is gone")
        image._ensure_mutable()
        return self._method(image, *args, **kwargs)


def _arrow_export_of_a_copy(image: Image.Image) -> Any:
    """``__arrow_c_array__`` for Pillow before 13, whose export of an image over a foreign
    buffer crashes the process: it exports a copy (an Arrow consumer gets the same pixels)."""
    ref = weakref.ref(image)

    def export(requested_schema: Any = None) -> Any:
        target = ref()
        if target is None:
            raise ReferenceError("the image of this export is gone")
        return target.copy().__arrow_c_array__(requested_schema)

    return export


# Pillow 13 exports an image over a foreign buffer; 11.3 to 12.3 crash (tests/python/test_pil.py).
_ARROW_EXPORT_SAFE = tuple(int(p) for p in Image.__version__.split(".")[:1]) >= (13,)


def _read_only_to_its_caller(image: Image.Image) -> None:
    """Makes an image that ``Image.fromarrow`` mapped onto cached pixels read-only to its
    caller: Pillow's writes copy it first, and so do the wrapped ``load()`` access and
    ``frombytes``; before Pillow 13 its Arrow export exports a copy."""
    image.readonly = 1
    image.load = _SharedLoad(image)  # type: ignore[method-assign]
    image.frombytes = _CopyFirst(image, Image.Image.frombytes)  # type: ignore[method-assign]
    if not _ARROW_EXPORT_SAFE:
        image.__arrow_c_array__ = _arrow_export_of_a_copy(image)  # type: ignore[method-assign]


# A Pillow whose ``fromarrow`` refused one RGB image refuses them all: not tried again.
_fromarrow_refused = False


def rgb_image(pixels: _native.Pixels) -> tuple[Image.Image, Optional[str]]:
    """A ``PIL.Image`` (mode ``RGB``) of an image's pixels, and why it is a copy (``None``
    when it is not).

    With Pillow's layout (``pixel_layout="rgbx"``, the default) and Pillow 11.3 or later,
    ``Image.fromarrow`` maps the image onto the cached pixels: nothing is copied, whatever the
    size. The image is read-only to its caller: ``putpixel``, ``paste``, ``ImageDraw`` and
    ``image.load()[x, y] = ...`` and ``frombytes`` first copy its pixels (as Pillow does for any
    read-only image) and change that image only; the cache and every other caller keep the
    original pixels. (``ImageCms.applyTransform(image, t, inPlace=True)`` writes through Pillow's
    core past the read-only flag: copy the image first.) Before Pillow 13, an Arrow export of
    the image (``__arrow_c_array__``) exports a copy: those versions crash exporting an image
    over a foreign buffer.
    Otherwise (``pixel_layout="rgb"``, or a Pillow without ``fromarrow``) the image is a copy
    of the same pixels.
    """
    global _fromarrow_refused
    fromarrow = getattr(Image, "fromarrow", None)
    refused: Optional[ValueError] = None
    if fromarrow is not None and pixels.layout == "rgbx" and not _fromarrow_refused:
        try:
            image = fromarrow(pixels, "RGB", (pixels.width, pixels.height))
        except ValueError as exc:  # a Pillow whose fromarrow takes no flat uint8 array
            refused = exc
            _fromarrow_refused = True
        else:
            _read_only_to_its_caller(image)
            return image, None
    if pixels.layout != "rgbx":
        reason = "the loader keeps 3 bytes a pixel (pixel_layout='rgb')"
    elif refused is not None:
        reason = f"Pillow {Image.__version__}'s Image.fromarrow refused them ({refused})"
    elif _fromarrow_refused:
        reason = f"Pillow {Image.__version__}'s Image.fromarrow refused an image before"
    else:
        reason = f"Pillow {Image.__version__} has no Image.fromarrow (11.3 or later has)"
    import numpy

    return Image.fromarray(numpy.asarray(pixels)), reason


def image_of(pixels: _native.Pixels) -> Image.Image:
    """A ``PIL.Image`` of ``pixels`` in their mode (``RGB``, ``L``, ``P``, ``RGBA``, ``LA``,
    ``1``, ``I;16``, ``CMYK``), mapped without a copy and read-only to the caller, with what
    Pillow keeps beside the pixels: a ``P`` image's palette, and for an image kept in its
    original mode ``info["transparency"]``, ``info["exif"]`` and ``info["xmp"]``. Where
    Pillow cannot map them (a Pillow whose ``fromarrow`` refuses the export), a copy of the
    same pixels."""
    size = (pixels.width, pixels.height)
    mode = pixels.mode
    try:
        image = Image.fromarrow(pixels, mode, size)
    except (AttributeError, ValueError):
        image = _copy_of(pixels, mode, size)
    else:
        _read_only_to_its_caller(image)
    palette = pixels.palette
    if palette is not None:
        image.putpalette(palette, "RGB")  # a palette of its own: the pixels are not written
    for key, value in (("transparency", pixels.transparency), ("exif", pixels.exif),
                       ("xmp", pixels.xmp)):
        if value is not None:
            image.info[key] = value
    return image


def _copy_of(pixels: _native.Pixels, mode: str, size: tuple[int, int]) -> Image.Image:
    """The image of ``pixels``, copied from their numpy view."""
    import numpy

    array = numpy.asarray(pixels)
    if mode == "RGB":
        return Image.fromarray(array)
    if mode == "LA":
        return Image.fromarray(numpy.ascontiguousarray(array), "LA")
    raw = "1;8" if mode == "1" else mode  # mode 1 is stored one byte a pixel
    return Image.frombytes(mode, size, numpy.ascontiguousarray(array).tobytes(), "raw", raw)
