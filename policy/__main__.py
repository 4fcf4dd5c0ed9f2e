"""Entry point of the policy pack: `pulumi preview --policy-pack policy` runs this file."""

from pulumi_policy import EnforcementLevel, PolicyPack

from policy.pack import PACK_NAME, policies

PolicyPack(name=PACK_NAME, enforcement_level=EnforcementLevel.MANDATORY, policies=policies())
