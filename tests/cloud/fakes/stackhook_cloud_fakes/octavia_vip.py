"""Octavia network driver: the no-op driver, except that a load balancer's VIP is a
real Neutron port.

Octavia's no-op network driver invents a VIP (address 198.51.100.1, random port ID)
that Neutron has never heard of, so a floating IP cannot be associated with it, as
clients do with every API load balancer. The real driver (allowed address pairs)
creates the port in Neutron and wires it to amphorae, which need Nova and a data
plane. This one creates and deletes the port the way the real driver does (name
`octavia-lb-<id>`, device owner `Octavia`, in the load balancer's project, on the
VIP subnet, with the requested address if any) and leaves the rest a no-op.
"""
import time

from keystoneauth1 import exceptions as ks_exc
from oslo_log import log as logging
from octavia.common import data_models
from octavia.common import keystone
from octavia.network.drivers.noop_driver import driver as noop

LOG = logging.getLogger(__name__)
OWNER = "Octavia"
NETWORK = {"service_type": "network", "interface": "public"}


def _session():
    return keystone.KeystoneSession().get_session()


class VipPortNetworkDriver(noop.NoopNetworkDriver):

    def allocate_vip(self, loadbalancer):
        vip = loadbalancer.vip
        if vip is None or vip.port_id or not (vip.subnet_id or vip.network_id):
            # A port the user gave, or nothing to place one on: as the no-op does.
            return super().allocate_vip(loadbalancer)
        s = _session()
        network_id = vip.network_id
        if vip.subnet_id:
            # Neutron's word, not the request's: the API fills `network_id` in through
            # the no-op driver, whose cache of subnets answers with the network of an
            # earlier load balancer.
            try:
                subnet = s.get("/v2.0/subnets/%s" % vip.subnet_id,
                               endpoint_filter=NETWORK).json()["subnet"]
            except ks_exc.HttpError as e:
                LOG.error("VIP subnet %s: %s; using the no-op VIP", vip.subnet_id, e)
                return super().allocate_vip(loadbalancer)
            network_id = subnet["network_id"]
        fixed = {}
        if vip.subnet_id:
            fixed["subnet_id"] = vip.subnet_id
        if vip.ip_address:
            fixed["ip_address"] = vip.ip_address
        body = {"port": {
            "name": "octavia-lb-%s" % loadbalancer.id,
            "network_id": network_id,
            "admin_state_up": False,
            "device_id": "lb-%s" % loadbalancer.id,
            "device_owner": OWNER,
            "project_id": loadbalancer.project_id,
        }}
        if fixed:
            body["port"]["fixed_ips"] = [fixed]
        port = None
        for attempt in range(3):
            try:
                port = s.post("/v2.0/ports", json=body,
                              endpoint_filter=NETWORK).json()["port"]
                break
            except ks_exc.HttpError as e:
                text = getattr(getattr(e, "response", None), "text", "")
                LOG.error("VIP port for load balancer %s, attempt %d: %s %s (body %s)",
                          loadbalancer.id, attempt + 1, e, text, body)
                time.sleep(1)
                s = _session()
        if port is None:
            # Never worse than the no-op driver: a VIP Neutron does not know.
            LOG.error("no VIP port in Neutron for load balancer %s; using the no-op VIP",
                      loadbalancer.id)
            return super().allocate_vip(loadbalancer)
        ip = port["fixed_ips"][0]
        return (data_models.Vip(ip_address=ip["ip_address"],
                                subnet_id=ip["subnet_id"],
                                network_id=port["network_id"],
                                port_id=port["id"],
                                load_balancer_id=loadbalancer.id),
                [])

    def deallocate_vip(self, vip):
        super().deallocate_vip(vip)
        if not vip.port_id:
            return
        s = _session()
        try:
            port = s.get("/v2.0/ports/%s" % vip.port_id,
                         endpoint_filter=NETWORK).json()["port"]
        except ks_exc.NotFound:
            return
        # Only the port this driver made; a port the user gave stays.
        if port.get("device_owner") == OWNER:
            try:
                s.delete("/v2.0/ports/%s" % vip.port_id, endpoint_filter=NETWORK)
            except ks_exc.NotFound:
                pass
