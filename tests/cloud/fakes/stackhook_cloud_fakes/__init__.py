"""Stand-in drivers for the stackhook test cloud.

Nothing here moves a packet or writes a block: the drivers only keep the
API-visible state machines (port binding, volume status) moving the way a
real backend would, so that Nova boots and Cinder volumes complete.
"""
