"""routefit's LLM provider simulator: a real HTTP server speaking OpenAI's, Anthropic's and
Google's Gemini wire formats, counting tokens by its own rules (the truth routefit's estimates
are tested against).

Start one with :func:`run_sim` (tests), ``python -m proxy.sim`` (bench), or the ``sim`` fixture in
``tests/sim_fixtures.py``. Its rules, models and fault controls are documented in docs/simulator.md.
"""

from proxy.sim.app import create_app
from proxy.sim.counting import Prompt, anthropic_prompt, gemini_prompt, openai_prompt
from proxy.sim.faults import Fault, FaultRule, parse_faults
from proxy.sim.models import BUILTIN_MODELS, SimModel, builtin_models, get_builtin, small_variant
from proxy.sim.server import SimServer, run_sim
from proxy.sim.state import SimConfig, SimState

__all__ = [
    "BUILTIN_MODELS",
    "Fault",
    "FaultRule",
    "Prompt",
    "SimConfig",
    "SimModel",
    "SimServer",
    "SimState",
    "anthropic_prompt",
    "builtin_models",
    "create_app",
    "gemini_prompt",
    "get_builtin",
    "openai_prompt",
    "parse_faults",
    "run_sim",
    "small_variant",
]
