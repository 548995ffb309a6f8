"""A translation pipeline for the sequence-to-sequence Transformer.

transformers 5 removed its ``translation`` and ``text2text-generation`` pipelines. A model saved by
``VanillaTransformerForConditionalGeneration.save_pretrained`` carries this file and names it in
``config.custom_pipelines``, so whoever downloads the folder gets the task back::

    pipeline("translation", model="user/model", trust_remote_code=True)

In-process, transformers refuses the name ``"translation"`` before it looks at a folder's code;
importing ``vanilla_transformer`` registers the same class as ``"vanilla-translation"``::

    pipeline("vanilla-translation", model=folder)

Decoding follows the model's generation config (the paper's §6.1: beam 4, length penalty 0.6, at most
input length + 50 tokens); any ``generate()`` argument overrides it for one call or for all calls. A text
longer than the model reads is cut to it with one warning, as ``translate`` cuts a line (``long_inputs.py``'s
policy; ``truncation=False`` reads it whole).
This file imports only torch, public transformers API and its sibling files (the configuration,
``long_inputs.py``): they travel with the weights.
"""

from __future__ import annotations

import torch
from transformers import Pipeline

from .configuration_vanilla_transformer import check_token_ids
from .long_inputs import encode_within, reading_limit, text_cut_warning, warn

TASK = "translation"
REGISTERED_TASK = "vanilla-translation"


class TranslationPipeline(Pipeline):
    """Translate text with an encoder-decoder model: ``[{"translation_text": ...}]`` per input.

    ``src_lang`` / ``tgt_lang`` are checked against the languages the model was trained on
    (``config.source_lang`` / ``config.target_lang``, where the training run recorded them): a model
    translates one direction, so asking for another is an error rather than a silent wrong answer.
    """

    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(
        self,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        truncation: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
        **generate_kwargs,
    ):
        self._check_languages(src_lang, tgt_lang)
        preprocess_params = {} if truncation is None else {"truncation": truncation}
        postprocess_params = (
            {}
            if clean_up_tokenization_spaces is None
            else {"clean_up_tokenization_spaces": clean_up_tokenization_spaces}
        )
        return preprocess_params, generate_kwargs, postprocess_params

    def _check_languages(self, src_lang: str | None, tgt_lang: str | None) -> None:
        for argument, field, value in (
            ("src_lang", "source_lang", src_lang),
            ("tgt_lang", "target_lang", tgt_lang),
        ):
            known = getattr(self.model.config, field, None)
            if value is not None and known is not None and value != known:
                raise ValueError(
                    f"`{argument}={value!r}`: this model translates {self.model.config.source_lang} -> "
                    f"{self.model.config.target_lang} (config.{field} is {known!r})."
                )

    def preprocess(self, text: str, truncation: bool = True):
        if not isinstance(text, str):
            raise TypeError(
                f"The translation pipeline takes a string or a list of strings, got {type(text)}."
            )
        # long_inputs' policy, as `translate` follows it: a text longer than the model reads is cut to it,
        # with one warning; truncation=False reads it whole (learned positions then refuse it).
        positions = getattr(self.model.config, "max_position_embeddings", None)
        limit, limit_name = reading_limit(positions, self.tokenizer.model_max_length)
        if not truncation:
            limit = None
        (ids,), cut = encode_within(self.tokenizer, [text], limit)
        inputs = {
            "input_ids": torch.tensor([ids]),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        }
        check_token_ids(inputs["input_ids"], self.model.config.vocab_size, "input_ids")  # not in forward
        if not text.strip():
            inputs["empty"] = True  # empty in, empty out: nothing to translate
        elif cut:
            result = "its translation covers only that part. Split long texts into sentences"
            warn(text_cut_warning(cut[0], limit, limit_name, result))
        return inputs

    def _forward(self, model_inputs, **generate_kwargs):
        batch = model_inputs["input_ids"].shape[0]
        if model_inputs.pop("empty", False):
            return {"output_ids": torch.empty((batch, 1, 0), dtype=torch.long)}
        generate_kwargs = self._call_generate_kwargs(generate_kwargs)
        with torch.no_grad():
            output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        # (inputs, sequences per input, length): the pipeline splits batches along the first axis.
        return {"output_ids": output_ids.reshape(batch, output_ids.shape[0] // batch, -1)}

    def _call_generate_kwargs(self, generate_kwargs: dict) -> dict:
        """The ``generate()`` arguments of one call: this call's, over those given when the pipeline was
        built, over the model's generation config (a ``generation_config`` passed to the call replaces
        the pipeline's).

        transformers 5.20 and later merge these in ``Pipeline._prepare_generate_kwargs``; earlier 5.x
        releases fold the build-time arguments into ``self.generation_config`` and leave the merge to
        each pipeline's ``_forward``. This file travels with the weights, so it works with both.
        """
        prepare = getattr(super(), "_prepare_generate_kwargs", None)
        if prepare is not None:
            return prepare(generate_kwargs)
        if "generation_config" in generate_kwargs:
            return generate_kwargs
        return {**generate_kwargs, "generation_config": self.generation_config}

    def postprocess(self, model_outputs, clean_up_tokenization_spaces: bool = False):
        return [
            {
                "translation_text": self.tokenizer.decode(
                    ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
            }
            for ids in model_outputs["output_ids"][0]
        ]

    def __call__(self, text: str | list[str], **kwargs):
        """One string gives ``[{"translation_text": ...}]``; a list gives one such dict per string
        (a list of dicts per string when ``num_return_sequences > 1``)."""
        result = super().__call__(text, **kwargs)
        if isinstance(text, list) and all(len(item) == 1 for item in result):
            return [item[0] for item in result]
        return result


def custom_pipelines_entry() -> dict:
    """The ``config.custom_pipelines`` entry that lets a saved folder serve ``pipeline("translation")``."""
    return {
        TASK: {
            "impl": f"{__name__.rsplit('.', 1)[-1]}.{TranslationPipeline.__name__}",
            "pt": ["AutoModelForSeq2SeqLM"],
            "type": "text",
        }
    }
