"""What every study report shares: table helpers, the figure conventions (``plotting``), the one
bootstrap, the studies' order and colours, the html form of tables and the kinds of inputs."""
