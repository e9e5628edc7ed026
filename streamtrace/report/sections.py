"""The report's sections, in the order of the Markdown (``Section``:
each its data, its Markdown, its charts).  A new section: one module with its class, one line here."""
from __future__ import annotations

from .collectives import CollectivesSection
from .config import ConfigurationSection
from .critical_path import CriticalPathSection
from .efficiency import EfficiencySection
from .explain import ExplainSection
from .groups import GroupsSection
from .p2p import P2PSection
from .pipeline import PipelineSection
from .ranks import RanksSection
from .steps import StepsSection
from .stragglers import StragglersSection
from .top_kernels import TopKernelsSection
from .whatif import WhatIfSection

SECTIONS = (
    CriticalPathSection(),
    WhatIfSection(),
    ConfigurationSection(),
    StepsSection(),
    EfficiencySection(),
    RanksSection(),
    CollectivesSection(),
    StragglersSection(),
    GroupsSection(),
    P2PSection(),
    PipelineSection(),
    TopKernelsSection(),
    ExplainSection(),
)
"""Every section of the report, in the Markdown's order; their data is built in this order too (a
section reads the entries of those before it: the efficiency reads ``steps``)."""
