"""ML2 mechanism driver that binds every port on every host.

Without any mechanism driver (and no L2 agents) Neutron leaves ports
unbound and Nova fails boots with PortBindingFailed. This driver binds each
port to the first segment as an OVS port and marks it ACTIVE.

It also stands in as the trunk driver for those ports, so that the trunk
service plugin (which refuses to load without a driver) serves the trunk API.

And it plays the L3 agent's one visible act: a floating IP goes ACTIVE once it
is associated with a port and DOWN when it is not. Clients wait for that (CAPO
waits for ACTIVE after associating; without it every such wait times out).
"""
from neutron.services.trunk.drivers import base as trunk_base
from neutron_lib import constants
from neutron_lib.callbacks import events
from neutron_lib.callbacks import registry
from neutron_lib.callbacks import resources
from neutron_lib.plugins import constants as plugin_constants
from neutron_lib.plugins import directory
from neutron_lib.api.definitions import portbindings
from neutron_lib.plugins.ml2 import api
from neutron_lib.services.trunk import constants as trunk_consts


class TrunkAnywhere(trunk_base.DriverBase):
    """Trunks on the ports BindAnywhere binds; nothing is wired."""

    @property
    def is_loaded(self):
        return True

    @classmethod
    def create(cls):
        return cls('stackhook_fakebind', (portbindings.VIF_TYPE_OVS,),
                   (trunk_consts.SEGMENTATION_TYPE_VLAN,),
                   agent_type=None, can_trunk_bound_port=True)


class BindAnywhere(api.MechanismDriver):
    def initialize(self):
        # Registers itself when the trunk plugin (if configured) starts.
        self.trunk_driver = TrunkAnywhere.create()
        for event in (events.AFTER_CREATE, events.AFTER_UPDATE):
            registry.subscribe(_floating_ip_status, resources.FLOATING_IP, event)

    def bind_port(self, context):
        segments = list(context.segments_to_bind or [])
        if not segments:
            return
        context.set_binding(
            segments[0][api.ID],
            portbindings.VIF_TYPE_OVS,
            {portbindings.CAP_PORT_FILTER: True,
             portbindings.OVS_HYBRID_PLUG: False},
            status=constants.PORT_STATUS_ACTIVE)

    def filter_hosts_with_segment_access(self, context, segments,
                                         candidate_hosts, agent_getter):
        # Every host can reach every segment: there is no real wiring.
        return set(candidate_hosts)


def _floating_ip_status(resource, event, trigger, payload):
    fip = payload.latest_state
    want = (constants.FLOATINGIP_STATUS_ACTIVE if fip.get('port_id')
            else constants.FLOATINGIP_STATUS_DOWN)
    if fip.get('status') == want:
        return
    l3 = directory.get_plugin(plugin_constants.L3)
    if l3 is not None:
        l3.update_floatingip_status(payload.context, fip['id'], want)
