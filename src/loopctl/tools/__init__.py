"""Ready-made tools for agents.

:mod:`loopctl.tools.files`: file tools confined to one folder (``FileTools(root)``: ``list_files``,
``read_file``, ``search``, ``write_file``, ``edit_file``), the tools of the ``loopctl`` command.
"""

__all__: list[str] = []  # the modules are the API: import from them
