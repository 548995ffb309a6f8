"""The demo page in a real browser: Debian's headless Chromium driven through its chromedriver
(selenium), against a Gradio server started here on a free localhost port, for a model trained here.
Nothing is downloaded at test time; without the two binaries the browser tests skip, saying so."""

import json
import os
import shutil
import socket
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CORPUS, encoder_only_config, run_without_the_package, tiny_config
from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi, RepoUrl
from packaging.requirements import Requirement
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.cli import build_parser, cmd_demo, main
from vanilla_transformer.demo import launch, load_for_demo, translate

# Found on PATH, as .ci/run looks for them (`command -v`) before installing Debian's packages.
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
# Run once (.ci/run): Gradio, selenium and Chromium are not pinned, so both stages would drive the same
# ones; the model side is the folders' pipelines (tests/test_pipelines_trainer.py) and the upload is
# push_to_hub (tests/test_hub.py), both checked at both ends of the ranges.
pytestmark = pytest.mark.newest_only

SENTENCES = CORPUS[:4]  # English: the tiny model learns to copy them
IMAGES = ["vt-encoder-attention", "vt-decoder-attention", "vt-cross-attention"]
VIRIDIS_TOP = (253, 231, 37)  # matplotlib's viridis at 1.0, the top of every picture's colour bar


@pytest.fixture(scope="module")
def translation_folder(tmp_path_factory, tokenizer):
    """A tiny translation model trained here (a few seconds of Adam) to copy four sentences. Not conftest's
    shared run: the page's checks compare its output with the sentence typed."""
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(d_model=32, d_ff=64, source_lang="en", target_lang="en")
    )
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(80):
        loss = model(**batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    folder = tmp_path_factory.mktemp("translation") / "model"
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    """Start a demo server for a folder on a free localhost port (in a background thread); its URL."""
    patch = pytest.MonkeyPatch()
    patch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
    patch.setenv("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio")))
    servers = []

    def start(folder) -> str:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        servers.append(launch(folder, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True))
        return f"http://127.0.0.1:{port}/"

    yield start
    for server in servers:
        server.close()
    patch.undo()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    missing = [
        name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if path is None
    ]
    if missing:
        reason = (
            f"No headless browser: {' and '.join(missing)} not on PATH (apt-get install chromium "
            "chromium-driver, as .ci/run does)."
        )
        if os.environ.get("CI", "").lower() == "true":  # CI installs them: missing there is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1300"):
        options.add_argument(argument)
    # Chromium's profile folders (org.chromium.Chromium.*) go under pytest's temporary folders, not /tmp.
    env = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))}
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, env=env), options=options)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout=30):
    return WebDriverWait(driver, timeout).until(lambda _: condition())


def _submit(driver, text: str) -> None:
    box = driver.find_element(By.CSS_SELECTOR, "#vt-input textarea")
    box.clear()
    box.send_keys(text)
    driver.find_element(By.ID, "vt-run").click()


def _output(driver) -> str:
    return driver.find_element(By.CSS_SELECTOR, "#vt-output textarea").get_attribute("value")


def _message(driver) -> str:
    return driver.find_element(By.ID, "vt-message").text


def _image(driver, elem_id: str) -> dict | None:
    """The picture's source and its decoded size, once the browser has loaded it; None while absent."""
    return driver.execute_script(
        "const img = document.querySelector(`#${arguments[0]} img`);"
        "return img && img.complete && img.naturalWidth"
        " ? {src: img.src, width: img.naturalWidth, height: img.naturalHeight} : null;",
        elem_id,
    )


def test_translation_page_translates_and_draws_the_three_attention_maps(
    browser, serve, translation_folder, tokenizer, tmp_path
):
    model = VanillaTransformerForConditionalGeneration.from_pretrained(translation_folder).eval()
    sentence = SENTENCES[1]
    expected = tokenizer.decode(  # the model's own decoding defaults (§6.1): what the page starts with
        model.generate(**tokenizer(sentence, return_tensors="pt"))[0], skip_special_tokens=True
    )
    assert expected == sentence  # the model learned its copy task

    browser.get(serve(translation_folder))
    _wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#vt-input textarea"))
    assert "en → en" in browser.find_element(By.TAG_NAME, "body").text  # the page says what it serves
    _submit(browser, sentence)
    _wait(browser, lambda: _output(browser))
    assert _output(browser) == expected
    _wait(browser, lambda: all(_image(browser, name) for name in IMAGES))
    pictures = {name: _image(browser, name) for name in IMAGES}
    # Each picture is one head's square, 0.3 inch a token + 1.2 (3.2 to 9 inches) at 100 dpi: the source's
    # tokens, the decoder's input (<s> + the translation, its </s> dropped), and the larger for the cross.
    source = len(tokenizer(sentence)["input_ids"])
    target = len(tokenizer(text_target=expected)["input_ids"])
    for name, tokens in zip(IMAGES, (source, target, max(source, target)), strict=True):
        side = 100 * min(9.0, max(3.2, 0.3 * tokens + 1.2))  # e.g. 3.5999... inches: 359 or 360 pixels
        width, height = pictures[name]["width"], pictures[name]["height"]
        assert width == height and abs(width - side) < 1, pictures

    # Another head: the cross-attention picture is redrawn (a different image), without re-translating.
    head = browser.find_element(By.CSS_SELECTOR, "#vt-head input[type=number]")
    head.send_keys(Keys.CONTROL, "a")
    head.send_keys("3", Keys.ENTER)
    _wait(
        browser,
        lambda: (_image(browser, IMAGES[2]) or {}).get("src") not in (None, pictures[IMAGES[2]]["src"]),
    )
    assert _output(browser) == expected
    browser.save_screenshot(str(tmp_path / "translation_page.png"))
    # The screenshot is the window's page: its size, and each heat map where the page shows it, the colour
    # bar's top (viridis at 1.0) inside the picture's box.
    screen = np.asarray(Image.open(tmp_path / "translation_page.png").convert("RGB")).astype(int)
    width, height, scale = browser.execute_script(
        "return [window.innerWidth, window.innerHeight, window.devicePixelRatio]"
    )
    assert screen.shape == (round(height * scale), round(width * scale), 3)
    for name in IMAGES:
        box = browser.find_element(By.CSS_SELECTOR, f"#{name} img").rect
        top, left = round(box["y"] * scale), round(box["x"] * scale)
        shown = screen[top : top + round(box["height"] * scale), left : left + round(box["width"] * scale)]
        assert shown.size and (np.abs(shown - VIRIDIS_TOP).max(-1) <= 12).sum() > 20, name


def test_bad_input_gets_a_message_on_the_page_and_the_server_keeps_serving(
    browser, serve, translation_folder
):
    browser.get(serve(translation_folder))
    _wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#vt-input textarea"))
    _submit(browser, "   ")
    _wait(browser, lambda: "empty" in _message(browser))
    assert _output(browser) == "" and "Traceback" not in browser.page_source

    _submit(browser, " ".join([SENTENCES[0]] * 12))  # 85 tokens, the model reads 64: cut, not refused
    _wait(browser, lambda: "first 64 tokens" in _message(browser))
    assert "85 tokens" in _message(browser) and "max_position_embeddings" in _message(browser)
    _wait(browser, lambda: _output(browser) != "" and _image(browser, IMAGES[2]))  # translated and drawn

    _submit(browser, SENTENCES[2])
    _wait(browser, lambda: _output(browser) == SENTENCES[2])
    _wait(browser, lambda: _image(browser, IMAGES[2]))
    assert _message(browser) == ""


def test_classifier_page_shows_every_label_with_its_score(browser, serve, tokenizer, tmp_path):
    config = encoder_only_config(num_labels=2, id2label={0: "NEGATIVE", 1: "POSITIVE"})
    model = VanillaTransformerForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path / "classifier")
    tokenizer.save_pretrained(tmp_path / "classifier")
    text = CORPUS[0]
    with torch.no_grad():
        probabilities = model(**tokenizer(text, return_tensors="pt")).logits[0].softmax(-1)
    best = config.id2label[int(probabilities.argmax())]

    browser.get(serve(tmp_path / "classifier"))
    _wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#vt-input textarea"))
    _submit(browser, text)
    heading = "#vt-output [data-testid=label-output-value]"
    _wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, heading))
    assert browser.find_element(By.CSS_SELECTOR, heading).text == best
    for index, name in config.id2label.items():  # each label's bar holds its probability
        bar = browser.find_element(By.CSS_SELECTOR, f"#vt-output [data-testid={name}-confidence-set] meter")
        assert float(bar.get_attribute("value")) == pytest.approx(float(probabilities[index]), abs=1e-5)
    _wait(browser, lambda: _image(browser, "vt-encoder-attention"))


def test_a_folder_that_is_no_model_of_ours_gets_a_page_that_says_so(browser, serve, tmp_path):
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    browser.get(serve(tmp_path / "bert"))
    _wait(browser, lambda: "Cannot serve" in _message(browser))
    assert "'bert'" in _message(browser) and "Traceback" not in browser.page_source


def test_the_cli_serves_the_demo_and_names_the_extra_without_gradio(monkeypatch, tmp_path):
    options = build_parser().parse_args(
        ["demo", "--model", "user/model", "--port", "8123", "--host", "0.0.0.0"]
    )
    assert (options.func, options.model, options.port, options.host) == (
        cmd_demo,
        "user/model",
        8123,
        "0.0.0.0",
    )
    monkeypatch.setitem(sys.modules, "gradio", None)  # as where the [demo] extra is not installed
    with pytest.raises(SystemExit, match=r"needs gradio: pip install 'vanilla-transformer\[demo\]'"):
        main(["demo", "--model", str(tmp_path)])


def test_the_decoding_settings_reach_generate(tokenizer, tmp_path):
    """Beam size, length penalty and the new-token bound of the page are generate()'s; 0 keeps §6.1's."""
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()  # untrained: long, varied output
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, inputs = load_for_demo(tmp_path), tokenizer(CORPUS[0], return_tensors="pt")

    def generated(**settings) -> str:
        return tokenizer.decode(model.generate(**inputs, **settings)[0], skip_special_tokens=True)

    assert translate(loaded, CORPUS[0], 1, 0.6, 3) == generated(num_beams=1, max_new_tokens=3)
    assert len(tokenizer(translate(loaded, CORPUS[0], 1, 0.6, 3), add_special_tokens=False)["input_ids"]) <= 3
    assert translate(loaded, CORPUS[0], 3, 0.6, 0) == generated(num_beams=3)  # differs from beam 4's
    assert translate(loaded, CORPUS[0], 4, 0.6, 0) == generated()  # the model's defaults
    # This model's beams all run to the length bound, so α cannot show in its output: read the call.
    calls = []
    generate = loaded.model.generate
    loaded.model.generate = lambda **kwargs: calls.append(kwargs) or generate(**kwargs)
    translate(loaded, CORPUS[0], 3, 1.5, 0)
    assert {key: calls[0][key] for key in ("num_beams", "length_penalty")} == {
        "num_beams": 3,
        "length_penalty": 1.5,
    }
    assert "max_new_tokens" not in calls[0]  # the model's own bound: source length + 50


APP_SCRIPT = """
import sys
sys.modules["vanilla_transformer"] = None  # a Space without the package
import app
loaded = app.load_for_demo(".")
assert type(loaded.model).__module__.startswith("transformers_modules"), type(loaded.model).__module__
print("translation:", app.translate(loaded, sys.argv[1], 2, 0.6, 0))
print(type(app.build_demo(".")).__name__)
"""


def test_push_with_demo_uploads_an_app_that_serves_the_model_without_the_package(
    monkeypatch, tmp_path, translation_folder
):
    """What `push --with-demo` sends is a Space's app.py: it loads the model through its remote code."""
    sent = tmp_path / "hub"

    def create_commit(api, repo_id, operations, **kwargs):
        for operation in operations:
            assert isinstance(operation, CommitOperationAdd)
            with operation.as_file() as source:
                (sent / operation.path_in_repo).parent.mkdir(parents=True, exist_ok=True)
                (sent / operation.path_in_repo).write_bytes(source.read())
        return CommitInfo(
            commit_url="https://huggingface.co/u/m/commit/0",
            commit_message="",
            commit_description="",
            oid="0",
        )

    monkeypatch.setattr(
        HfApi, "create_repo", lambda api, repo_id, **kw: RepoUrl(f"https://huggingface.co/{repo_id}")
    )
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    folder = tmp_path / "model"
    shutil.copytree(translation_folder, folder)
    main(["push", "--model", str(folder), "--repo-id", "u/m", "--with-demo"])  # writes the card it lacks
    assert {"app.py", "attention_maps.py", "requirements.txt", "model.safetensors"} <= set(os.listdir(sent))
    # The Space installs what the package declares (pyproject.toml), gradio from the `demo` extra.
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    declared = pyproject["project"]["dependencies"] + pyproject["project"]["optional-dependencies"]["demo"]
    declared = {Requirement(line).name: Requirement(line).specifier for line in declared}
    space = [Requirement(line) for line in (sent / "requirements.txt").read_text().splitlines()]
    assert [r.name for r in space] == [
        "torch",
        "transformers",
        "tokenizers",
        "safetensors",
        "matplotlib",
        "gradio",
    ]
    assert all(r.specifier == declared[r.name] and r.marker is None for r in space)

    result = run_without_the_package(APP_SCRIPT, SENTENCES[3], folder=sent)
    assert result.stdout.splitlines()[-2:] == [f"translation: {SENTENCES[3]}", "Blocks"]
    assert translate(load_for_demo(sent), SENTENCES[3], 2, 0.6, 0) == SENTENCES[3]


@pytest.mark.parametrize("reading", ["head_tail", "windows"])
def test_the_classifier_page_reads_long_texts_as_the_folders_pipeline(reading, tokenizer, tmp_path):
    """A review longer than the model's positions is not refused: the page scores it as the saved
    reading says (head + tail, or windows with averaged logits), exactly as the folder's own pipeline
    (and `classify evaluate`) score it, and says how it was read."""
    from transformers import pipeline

    from vanilla_transformer.demo import classify

    config = encoder_only_config(
        num_labels=2,
        id2label={0: "NEGATIVE", 1: "POSITIVE"},
        max_position_embeddings=24,
        classifier_long_text=reading,
        classifier_head_tokens=8,
    )
    VanillaTransformerForSequenceClassification(config).eval().save_pretrained(tmp_path / "classifier")
    tokenizer.save_pretrained(tmp_path / "classifier")
    text = " ".join(CORPUS * 3)
    assert len(tokenizer(text)["input_ids"]) > 3 * 24  # several windows, and head + tail differ from the head
    scores, note = classify(load_for_demo(str(tmp_path / "classifier")), text)
    expected = pipeline("text-classification", model=str(tmp_path / "classifier"), trust_remote_code=True)(
        text, top_k=None
    )
    assert scores == pytest.approx({row["label"]: row["score"] for row in expected}, abs=1e-6)
    assert reading in note
    short, note = classify(load_for_demo(str(tmp_path / "classifier")), CORPUS[0])
    assert note == "" and sum(short.values()) == pytest.approx(1.0)
