from vnpu_core import errors


def test_config_error_names_path_and_value() -> None:
    exc = errors.ConfigError(
        "vnpus.configs[2].templates[0].memory", "8G", "must be MiB", source="a.yaml"
    )
    assert str(exc) == "a.yaml: vnpus.configs[2].templates[0].memory: must be MiB (got '8G')"
    assert exc.path == "vnpus.configs[2].templates[0].memory"


def test_request_error_names_container_resource_value() -> None:
    exc = errors.RequestError("main", "huawei.com/Ascend310P-memory", "4Gi", "write MiB, e.g. 4096")
    assert "main" in str(exc)
    assert "4Gi" in str(exc)
    assert "huawei.com/Ascend310P-memory" in str(exc)


def test_pin_error_leads_with_the_annotation_field_and_value() -> None:
    pod_wide = errors.PinError("(pod)", "vnpu.io/template", "vir09", "unknown template")
    assert str(pod_wide) == "metadata.annotations[vnpu.io/template]=vir09: unknown template"
    one = errors.PinError("main", "vnpu.io/template", "vir02", "too small")
    assert str(one) == "metadata.annotations[vnpu.io/template]=vir02: container 'main': too small"
    assert isinstance(one, errors.RequestError)
    assert (one.container, one.resource, one.value, one.problem) == (
        "main",
        "vnpu.io/template",
        "vir02",
        "too small",
    )
