"""Text → Zonos phoneme ids: eSpeak NG through the `phonemizer` package, with the options the
published conditioner uses (stress marks kept, punctuation kept as its own symbols), then the
published symbol table (ids 0-3 are pad, unknown, begin and end; an unknown symbol is 1).

eSpeak NG is a system program (`apt-get install espeak-ng`, `make zonos-deps`); phonemizer
finds its library. Zonos' own text cleaning (number spelling through `inflect`, Japanese through
Sudachi) is not reproduced: eSpeak reads digits itself, and Japanese text is refused.
"""

from __future__ import annotations

import functools
import shutil

from models.base import ModelInputError
from models.zonos.languages import LANGUAGES, UNAVAILABLE

PAD, UNKNOWN, BEGIN, END = 0, 1, 2, 3
PUNCTUATION = ';:,.!?¡¿—…"«»“”() *~-/\\&'
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_IPA = "ɑɐɒæɓʙβɔɕçɗɖðʤəɘɚɛɜɝɞɟʄɡɠɢʛɦɧħɥʜɨɪʝɭɬɫɮʟɱɯɰŋɳɲɴøɵɸθœɶʘɹɺɾɻʀʁɽʂʃʈʧʉʊʋⱱʌɣɤʍχʎʏʑʐʒʔʡʕʢǀǁǂǃˈˌːˑʼʴʰʱʲʷˠˤ˞↓↑→↗↘'̩'ᵻ"
SYMBOLS = (*PUNCTUATION, *_LETTERS, *_IPA)
VOCAB_SIZE = 4 + len(SYMBOLS)  # the phoneme embedding's rows
# A repeated symbol (the IPA string has "'" twice) keeps its last id, as a dict built in order.
_ID = {s: i for i, s in enumerate(SYMBOLS, start=4)}


def espeak_available() -> bool:
    """eSpeak NG's program is installed (its library comes with it) and phonemizer imports."""
    try:
        import phonemizer  # noqa: F401
    except ImportError:
        return False
    return shutil.which("espeak-ng") is not None


def language_id(language: str) -> int:
    code = language.lower()
    if code not in LANGUAGES:
        raise ModelInputError(
            f"language {language!r} is not one Zonos knows; use an eSpeak code such as en-us, "
            f"de, fr-fr, es, ja, cmn (all: {' '.join(LANGUAGES)})"
        )
    if code in UNAVAILABLE:
        raise ModelInputError(UNAVAILABLE[code])
    return LANGUAGES.index(code)


@functools.cache
def _backend(language: str):
    import logging

    try:
        from phonemizer.backend import EspeakBackend
    except ImportError:
        raise ModelInputError(
            "Zonos needs the phonemizer package (pip install 'voxgate[zonos]')"
        ) from None
    logger = logging.getLogger("phonemizer")
    logger.setLevel(logging.ERROR)
    try:
        return EspeakBackend(
            language,
            preserve_punctuation=True,
            with_stress=True,
            punctuation_marks=PUNCTUATION,
            logger=logger,
        )
    except RuntimeError as exc:  # no libespeak-ng
        raise ModelInputError(
            f"Zonos needs eSpeak NG for its phonemes ({exc}); install it: apt-get install espeak-ng"
        ) from None


def warm_up(language: str = "en-us") -> None:
    """Start eSpeak for `language` now (about a second on first use) rather than in the first
    request, when it is installed; without it requests get the install hint instead."""
    if espeak_available():
        _backend(language)


def phonemize(text: str, language: str) -> str:
    language_id(language)  # a clear error for an unknown language first
    return _backend(language.lower()).phonemize([text], strip=True)[0]


def phoneme_ids(phonemes: str) -> list[int]:
    """The conditioner's ids: begin, one id per symbol, end."""
    return [BEGIN, *(_ID.get(s, UNKNOWN) for s in phonemes), END]
