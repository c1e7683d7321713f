"""Texts in ten scripts, and runs of whitespace, as request bodies: what a new route's prior is
held to (tests/pricing/test_calibration.py) and measured against (bench/prior_scripts.py)."""

from __future__ import annotations

#: One sentence in each script a tokenizer may have few pieces for (the weather and a request
#: to read the meeting's papers by Friday), and emoji.
_SENTENCES = {
    "russian": "Погода в Москве ясная. Пожалуйста, проверьте материалы встречи до пятницы.",
    "greek": "Ο καιρός στην Αθήνα είναι καθαρός. Παρακαλώ ελέγξτε τα έγγραφα της συνάντησης.",
    "chinese": "北京今天天气晴朗。请在星期五之前检查会议材料，并把结果发给我。",
    "japanese": "東京は晴れです。会議の資料を金曜日までに確認してください。",
    "korean": "서울의 날씨는 맑습니다. 금요일까지 회의 자료를 확인해 주세요.",
    "arabic": "الطقس في القاهرة صاف. يرجى مراجعة مواد الاجتماع قبل يوم الجمعة.",
    "hebrew": "מזג האוויר בירושלים בהיר. אנא בדקו את חומרי הפגישה לפני יום שישי.",
    "hindi": "दिल्ली में मौसम साफ है। कृपया शुक्रवार से पहले बैठक की सामग्री देखें।",
    "thai": "อากาศในกรุงเทพฯ แจ่มใส กรุณาตรวจสอบเอกสารการประชุมก่อนวันศุกร์",
    "emoji": "👍🏽 🎉 🚀 ✅ 🔥 😀 🙏🏻 💡 📈 🧪",
}
#: Each script's text: its sentence 30 times.
SCRIPTS = {name: " ".join([sentence] * 30) for name, sentence in _SENTENCES.items()}


#: Runs of whitespace some tokenizers spend a token a character on, where o200k reads a run in
#: one: lines indented by tabs (Go), blank lines between paragraphs, columns aligned by spaces.
WHITESPACE = {
    "tabs": "\n".join("\t" * (1 + i % 8) + f"node{i}" for i in range(100)),
    "blank lines": "\n".join("para" + "\n" * (1 + i % 6) for i in range(200)),
    "spaces": "\n".join("x" + " " * (1 + (7 * i) % 40) + "y" for i in range(100)),
}


def script_bodies(text: str) -> list[dict]:
    """The text as a user's message, and as a tool's output in an agent's turn."""
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return [
        {"model": "m", "messages": [{"role": "user", "content": text}]},
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Read the notes."},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": text},
            ],
        },
    ]
