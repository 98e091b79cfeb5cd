"""Launchers; a package so that tests import `launch.tpu_run` as a module."""
