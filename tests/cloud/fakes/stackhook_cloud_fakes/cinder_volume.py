"""Cinder volume driver that stores nothing.

Every data-path call succeeds without touching a disk: volumes, snapshots,
clones and image copies are bookkeeping only, and attachments hand Nova an
iSCSI connection description that nothing serves (Nova's fake virt driver
never connects it). Volumes created from a Glance image, and so
boot-from-volume with an image source, reach 'available' without qemu-img,
LVM, sudo or iSCSI. Each backend reports 100000 GiB free.
"""
from cinder.volume import driver

VERSION = "1.0.0"


class NullVolumeDriver(driver.VolumeDriver):
    VERSION = VERSION
    SUPPORTS_ACTIVE_ACTIVE = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._stats = {}

    # setup
    def do_setup(self, context):
        pass

    def check_for_setup_error(self):
        pass

    def _update_volume_stats(self):
        name = self.configuration.safe_get("volume_backend_name") or "null"
        self._stats = {
            "volume_backend_name": name,
            "vendor_name": "stackhook test cloud",
            "driver_version": VERSION,
            "storage_protocol": "iSCSI",
            "pools": [{
                "pool_name": name,
                # finite numbers: the scheduler's capacity notifications
                # break on "infinite" pools
                "total_capacity_gb": 100000,
                "free_capacity_gb": 100000,
                "allocated_capacity_gb": 0,
                "provisioned_capacity_gb": 0,
                "reserved_percentage": 0,
                "max_over_subscription_ratio": 20.0,
                "thin_provisioning_support": True,
                "thick_provisioning_support": True,
                "QoS_support": False,
                "multiattach": True,
            }],
        }

    # volumes and snapshots: bookkeeping only
    def create_volume(self, volume):
        return None

    def delete_volume(self, volume):
        pass

    def create_snapshot(self, snapshot):
        return None

    def delete_snapshot(self, snapshot):
        pass

    def create_volume_from_snapshot(self, volume, snapshot):
        return None

    def create_cloned_volume(self, volume, src_vref):
        return None

    def extend_volume(self, volume, new_size):
        pass

    def retype(self, context, volume, new_type, diff, host):
        return True, None

    # image copies: nothing to copy
    def clone_image(self, context, volume, image_location, image_meta, image_service):
        # Claim a "clone" so that Cinder neither downloads the image nor runs
        # its format checks (they need qemu-img and sudo for privsep).
        return {}, True

    def copy_image_to_volume(self, context, volume, image_service, image_id,
                             disable_sparse=False):
        pass

    def copy_image_to_encrypted_volume(self, context, volume, image_service, image_id,
                                       disable_sparse=False):
        pass

    def copy_volume_to_image(self, context, volume, image_service, image_meta):
        pass

    # exports and connections
    def ensure_export(self, context, volume):
        pass

    def create_export(self, context, volume, connector):
        return None

    def remove_export(self, context, volume):
        pass

    def initialize_connection(self, volume, connector):
        return {
            "driver_volume_type": "iscsi",
            "data": {
                "target_discovered": False,
                "target_iqn": "iqn.2010-10.org.openstack:volume-%s" % volume["id"],
                "target_portal": "127.0.0.1:3260",
                "target_lun": 0,
                "volume_id": volume["id"],
                "access_mode": "rw",
            },
        }

    def terminate_connection(self, volume, connector, **kwargs):
        pass
