"""Decoder errors of the API server made readable (platform/model/api_errors.py) and told in a
Template's terms (operator/rules/refusals.py). The messages are the real server's, recorded from
tests/integration/test_api_errors.py; that test checks the same against the server itself."""

from __future__ import annotations

import pytest

from userland.operator.rules.refusals import podspec_refusal
from userland.platform.model.api_errors import QUANTITY_HELP, _json_name, explain_decode_error, readable

PREFIX = ('Deployment in version "v1" cannot be handled as a Deployment: v1.Deployment.Spec: '
          "v1.DeploymentSpec.Template: v1.PodTemplateSpec.Spec: v1.PodSpec.Containers: []v1.Container: ")
REGEX = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
MEMORY = (PREFIX + "v1.Container.Resources: v1.ResourceRequirements.Limits: unmarshalerDecoder: " + REGEX
          + ', error found in #10 byte of ...|ory":"1Gb"}}}]}}}}|..., bigger context ...|,"image":"j",'
          '"resources":{"limits":{"memory":"1Gb"}}}]}}}}|...')
PORT = (PREFIX + "v1.Container.Ports: []v1.ContainerPort: v1.ContainerPort.ContainerPort: readUint32: "
        'unexpected character: \ufffd, error found in #10 byte of ...|nerPort":"http"}]}]}|..., bigger '
        'context ...|name":"db","image":"j","ports":[{"containerPort":"http"}]}]}}}}|...')
PROBE = (PREFIX + "v1.Container.ReadinessProbe: v1.Probe.Handler: v1.Handler.HTTPGet: v1.HTTPGetAction.Path: "
         'ReadString: expects " or n, but found 8, error found in #10 byte of ...|"path":80}}}]}}}}|...')


def test_a_quantity_with_a_wrong_unit() -> None:
    explained = explain_decode_error(MEMORY)
    assert explained is not None
    assert explained.field == "spec.template.spec.containers[].resources.limits.memory"
    assert explained.value == '"1Gb"'
    assert explained.message == (f'{explained.field}: "1Gb" is not a valid quantity: {QUANTITY_HELP} '
                                 '("Gb" is not a unit: did you mean "1Gi"?)')


def test_a_number_field_and_a_nested_probe_without_bigger_context() -> None:
    port = explain_decode_error(PORT)
    assert port is not None and port.message == (
        'spec.template.spec.containers[].ports[].containerPort: "http" must be a number')
    probe = explain_decode_error(PROBE)
    assert probe is not None and probe.message == (
        "spec.template.spec.containers[].readinessProbe.httpGet.path: 80 must be text "
        "(a string in quotes)")


@pytest.mark.parametrize(("go", "json_name"), [("Limits", "limits"), ("HTTPGet", "httpGet"),
                                               ("TCPSocket", "tcpSocket"), ("ID", "id"), ("x", "x"),
                                               ("Handler", None), ("ObjectMeta", "metadata")])
def test_json_names(go: str, json_name: str | None) -> None:
    assert _json_name(go) == json_name


def test_other_messages_keep_their_words_without_the_byte_dump() -> None:
    assert readable("the server could not find the requested resource") == (
        "the server could not find the requested resource")
    dump = 'json: cannot unmarshal, error found in #3 byte of ...|{"a|...'
    assert readable(dump) == "json: cannot unmarshal"


def test_a_refusal_in_the_templates_terms_names_the_container() -> None:
    pod_spec = {"containers": [{"name": "main", "image": "i"},
                               {"name": "db", "image": "j", "resources": {"limits": {"memory": "1Gb"}}}]}
    explained = explain_decode_error(MEMORY)
    assert explained is not None
    text = podspec_refusal(explained.message, pod_spec, field=explained.field, value=explained.value)
    assert text.startswith('the API server refused it: spec.podSpec.containers[1].resources.limits.memory: '
                           '"1Gb" is not a valid quantity')
    # A 422 names its item already; the dry run's object name goes.
    assert podspec_refusal('Deployment.apps "ide-dry-run" is invalid: spec.template.spec.containers[0].name: '
                           'Invalid value: "A_B": a lowercase RFC 1123 label', {}) == (
        'the API server refused it: spec.podSpec.containers[0].name: Invalid value: "A_B": a lowercase '
        "RFC 1123 label")
