"""Reports: an HTML page with tables and matplotlib plots for every run folder.

`render` assembles a run's page from sections (`sections`), `plots` draws their figures, `sweep`
renders a sweep's comparison page. Import the module you need; nothing is imported here.
"""
