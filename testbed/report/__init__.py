"""Reports: an HTML page with tables and matplotlib plots for every run folder."""

from testbed.report.render import RunData, render_report
from testbed.report.sections import SECTIONS, ReportSection, register_section

__all__ = ["RunData", "render_report", "SECTIONS", "ReportSection", "register_section"]
