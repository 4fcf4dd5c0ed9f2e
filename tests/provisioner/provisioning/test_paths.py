"""pathPattern rendering (rancher's Go-template subset), path safety, base-path choice."""

import pytest

from provisioner.provisioning.paths import (
    MAX_VOLUME_PATH_BYTES,
    PATH_MAX,
    PathPatternError,
    PathTooLong,
    PatternFields,
    check_pattern,
    check_volume_path,
    choose_base_path,
    default_folder_name,
    is_deletable_path,
    is_strictly_inside,
    render_pattern,
    resolve_volume_path,
)

FIELDS = PatternFields(
    pv_name="pvc-1234",
    namespace="team-a",
    name="data",
    labels={"app": "web", "app.kubernetes.io/name": "db"},
    annotations={"sub": "cache", "with space": "v"},
)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("{{.PVName}}", "pvc-1234"),
        ("{{ .PVC.Namespace }}/{{ .PVC.Name }}", "team-a/data"),
        ("{{.PVC.Namespace}}/{{.PVC.Name}}/", "team-a/data/"),
        ('{{index .PVC.Labels "app"}}', "web"),
        ('{{ index .PVC.Labels "app.kubernetes.io/name" }}', "db"),
        ('{{index .PVC.Annotations "sub"}}', "cache"),
        ('{{index .PVC.Annotations "with space"}}', "v"),
        ("{{index .PVC.Annotations `sub`}}", "cache"),
        ("{{.PVC.Labels.app}}", "web"),
        ("{{ .PVC.Annotations.sub }}", "cache"),
        ('{{index .PVC.Labels "missing"}}', ""),
        ("{{.PVC.Labels.missing}}", ""),
        ("{{- .PVC.Namespace -}} / {{- .PVC.Name }}", "team-a/data"),
        ("a  {{- .PVC.Name}}", "adata"),
        ("{{.PVC.Name -}}\n\t  x", "datax"),
        ("{{/* a comment */}}{{.PVC.Name}}", "data"),
        ('{{"literal"}}-{{.PVC.Name}}', "literal-data"),
        ("no actions at all", "no actions at all"),
        ("braces } and }} stay", "braces } and }} stay"),
        ("{{.PVName}}_{{.PVC.Namespace}}_{{.PVC.Name}}", "pvc-1234_team-a_data"),
    ],
)
def test_rendering_matches_go_templates(pattern: str, expected: str) -> None:
    assert render_pattern(pattern, FIELDS) == expected


UNSUPPORTED = (
    "only {{.PVName}}, {{.PVC.Namespace}}, {{.PVC.Name}}, {{.PVC.Labels.<key>}}, "
    '{{.PVC.Annotations.<key>}}, {{index .PVC.Labels "<key>"}}, {{index .PVC.Annotations "<key>"}}'
    " are available"
)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("{{.PVC.Name", "unclosed action {{.PVC.Name: add the closing }}"),
        ("{{.PVC.UID}}", f"unsupported action {{{{.PVC.UID}}}}: {UNSUPPORTED}"),
        ("{{.pvName}}", f"unsupported action {{{{.pvName}}}}: {UNSUPPORTED}"),
        ("{{.}}", f"unsupported action {{{{.}}}}: {UNSUPPORTED}"),
        ("{{}}", f"unsupported action {{{{}}}}: {UNSUPPORTED}"),
        ("{{.PVC.Labels}}", f"unsupported action {{{{.PVC.Labels}}}}: {UNSUPPORTED}"),
        ("{{.PVC.Labels.a.b}}", f"unsupported action {{{{.PVC.Labels.a.b}}}}: {UNSUPPORTED}"),
        (
            '{{printf "%s" .PVName}}',
            f'unsupported action {{{{printf "%s" .PVName}}}}: {UNSUPPORTED}',
        ),
        ("{{.PVName | html}}", f"unsupported action {{{{.PVName | html}}}}: {UNSUPPORTED}"),
        ("{{$x := 1}}", f"unsupported action {{{{$x := 1}}}}: {UNSUPPORTED}"),
        ('{{index .PVC "Name"}}', f'unsupported action {{{{index .PVC "Name"}}}}: {UNSUPPORTED}'),
        ("{{index .PVC.Labels}}", f"unsupported action {{{{index .PVC.Labels}}}}: {UNSUPPORTED}"),
        (
            '{{index .PVC.Labels "a\\q"}}',
            'bad string literal "a\\q" in {{index .PVC.Labels "a\\q"}}',
        ),
        ("{{if .PVName}}x{{end}}", f"unsupported action {{{{if .PVName}}}}: {UNSUPPORTED}"),
    ],
)
def test_unsupported_templates_are_refused_clearly(pattern: str, expected: str) -> None:
    with pytest.raises(PathPatternError) as caught:
        check_pattern(pattern)
    assert str(caught.value) == expected


def test_default_folder_is_rancher_s() -> None:
    assert default_folder_name("pvc-1", "ns", "claim") == "pvc-1_ns_claim"
    assert resolve_volume_path("/opt/lp", None, FIELDS) == "/opt/lp/pvc-1234_team-a_data"


def test_safe_patterns_resolve_inside_namespace_and_name() -> None:
    sub = "{{.PVC.Namespace}}/{{.PVC.Name}}/{{.PVC.Annotations.sub}}"
    assert resolve_volume_path("/opt/lp", sub, FIELDS) == "/opt/lp/team-a/data/cache"
    # rancher requires a trailing slash here; the directory namespace/name itself is just as safe.
    assert resolve_volume_path("/opt/lp", "{{.PVC.Namespace}}/{{.PVC.Name}}", FIELDS) == (
        "/opt/lp/team-a/data"
    )


def test_unsafe_opt_in_relaxes_only_the_namespace_rule() -> None:
    assert resolve_volume_path("/opt/lp", "{{.PVName}}", FIELDS, allow_unsafe=True) == (
        "/opt/lp/pvc-1234"
    )
    with pytest.raises(PathPatternError, match=r"'\.\.' component"):
        resolve_volume_path("/opt/lp", "{{.PVName}}/../../etc", FIELDS, allow_unsafe=True)


def hostile(
    annotation: str = "", *, namespace: str = "team-a", name: str = "data"
) -> PatternFields:
    return PatternFields("pvc-9", namespace, name, {"l": annotation}, {"x": annotation})


NESTED = '{{.PVC.Namespace}}/{{.PVC.Name}}/{{index .PVC.Annotations "x"}}'
ESCAPES: list[tuple[str, PatternFields, bool]] = [
    # the advisory's case: the prefix is right, the cleaned path is another volume's
    (NESTED, hostile("../../otherns/victim"), False),
    (NESTED, hostile(".."), False),
    (NESTED, hostile("../.."), False),
    (NESTED, hostile("../../../../etc"), False),
    (NESTED, hostile("."), False),
    (NESTED, hostile("./../x"), False),
    (NESTED, hostile("a/../../b"), False),
    (NESTED, hostile("/etc/passwd"), False),  # "ns/name//etc/passwd": an empty component
    (NESTED, hostile("x\x00y"), False),
    (NESTED, hostile("x\ny"), False),
    (NESTED, hostile("x\r"), False),
    (NESTED, hostile("a//b"), False),
    ("{{.PVC.Namespace}}/{{.PVC.Name}}/{{.PVC.Labels.l}}", hostile("../../../root"), False),
    ('{{index .PVC.Annotations "x"}}', hostile("/etc"), False),
    ('{{index .PVC.Annotations "x"}}', hostile("/"), False),
    ('{{index .PVC.Annotations "x"}}', hostile(""), False),
    ('{{index .PVC.Annotations "x"}}/{{.PVC.Namespace}}/{{.PVC.Name}}', hostile("other"), False),
    ("{{.PVC.Namespace}}", hostile(), False),
    ("{{.PVC.Namespace}}/{{.PVC.Name}}x", hostile(), False),
    ("{{.PVC.Namespace}}x/{{.PVC.Name}}", hostile(), False),
    ("../{{.PVC.Namespace}}/{{.PVC.Name}}", hostile(), False),
    ("{{.PVC.Namespace}}/{{.PVC.Name}}/..", hostile(), False),
    ("{{.PVC.Namespace}}/../{{.PVC.Namespace}}/{{.PVC.Name}}", hostile(), False),
    ("/{{.PVC.Namespace}}/{{.PVC.Name}}", hostile(), False),
    ("", hostile(), False),
    ("/", hostile(), False),
    # the opt-out: namespace/name confinement is gone, the base path still holds
    ('{{index .PVC.Annotations "x"}}', hostile("../etc"), True),
    ('{{index .PVC.Annotations "x"}}', hostile(".."), True),
    ('{{index .PVC.Annotations "x"}}', hostile("/etc"), True),
    ('{{index .PVC.Annotations "x"}}', hostile("."), True),
    ("{{.PVName}}/{{.PVC.Labels.l}}", hostile("../../.."), True),
    ('{{index .PVC.Annotations "x"}}', hostile("a\x00"), True),
]


@pytest.mark.parametrize(("pattern", "fields", "allow_unsafe"), ESCAPES)
def test_escape_corpus_never_leaves_the_allowed_directory(
    pattern: str, fields: PatternFields, allow_unsafe: bool
) -> None:
    with pytest.raises(PathPatternError):
        resolve_volume_path("/opt/lp", pattern, fields, allow_unsafe=allow_unsafe)


@pytest.mark.parametrize(
    ("namespace", "name"), [("..", "x"), ("ns", ".."), (".", "."), ("a/b", "c"), ("ns", "")]
)
def test_hostile_claim_names_cannot_widen_the_scope(namespace: str, name: str) -> None:
    # Namespaces and names are DNS labels in practice; the check must not rely on that.
    fields = hostile(namespace=namespace, name=name)
    with pytest.raises(PathPatternError):
        resolve_volume_path("/opt/lp", "{{.PVC.Namespace}}/{{.PVC.Name}}/v", fields)


@pytest.mark.parametrize(
    "annotation", ["a\tb", "a\\b", "a\\011b", "\x1b[2J", "a\x7f", "a\x01", "a\x00", "a\nb"]
)
def test_control_characters_and_backslashes_are_refused_naming_the_character(
    annotation: str,
) -> None:
    """The quota script once took a tab or backslash path for `/` and set no quota: no such
    path reaches the helper, whatever the class allows."""
    for allow_unsafe in (False, True):
        with pytest.raises(PathPatternError) as caught:
            resolve_volume_path("/opt/lp", NESTED, hostile(annotation), allow_unsafe=allow_unsafe)
        character = next(c for c in annotation if c == "\\" or ord(c) < 32 or ord(c) == 127)
        assert str(caught.value) == (
            f"rendered path {'team-a/data/' + annotation!r} contains {character!r}: control"
            " characters and backslashes are refused in volume paths; change the pattern or the"
            " label or annotation it renders"
        )


def test_blanks_quotes_and_other_printable_characters_still_render() -> None:
    for annotation in ("a b", "a'b", 'a"b', "caf\u00e9", "a$b"):
        assert resolve_volume_path("/opt/lp", NESTED, hostile(annotation)) == (
            f"/opt/lp/team-a/data/{annotation}"
        )


def test_check_volume_path_messages() -> None:
    with pytest.raises(PathPatternError) as caught:
        check_volume_path("/b", "ns/n/../../x", ("ns", "n"))
    assert str(caught.value) == "rendered path 'ns/n/../../x' has a '..' component"
    with pytest.raises(PathPatternError) as caught:
        check_volume_path("/b", "ns//n", ("ns", "n"))
    assert str(caught.value) == (
        "rendered path 'ns//n' has an empty component: is a label or annotation the pattern uses"
        " missing?"
    )
    with pytest.raises(PathPatternError) as caught:
        check_volume_path("/b", "other/n", ("ns", "n"))
    assert str(caught.value) == (
        "rendered path 'other/n' is not inside ns/n/: start the pattern with"
        ' "{{.PVC.Namespace}}/{{.PVC.Name}}/" or set allowUnsafePathPattern'
    )


@pytest.mark.parametrize(
    ("path", "bases", "deletable"),
    [
        ("/opt/lp/pvc-1_ns_c", ["/opt/lp"], True),
        ("/opt/lp/ns/c/deep", ["/data", "/opt/lp"], True),
        ("/opt/lp", ["/opt/lp"], False),
        ("/opt", ["/opt/lp"], False),
        ("/", ["/opt/lp"], False),
        ("/opt/lpx/pvc-1", ["/opt/lp"], False),
        ("/opt/lp/../../etc", ["/opt/lp"], False),
        ("/opt/lp/./x", ["/opt/lp"], False),
        ("/opt/lp//x", ["/opt/lp"], False),
        ("//opt/lp/x", ["/opt/lp"], False),
        ("/opt/lp/x/", ["/opt/lp"], False),
        ("opt/lp/x", ["/opt/lp"], False),
        ("", ["/opt/lp"], False),
        ("/opt/lp/x\ny", ["/opt/lp"], False),
        ("/opt/lp/x\x00", ["/opt/lp"], False),
        ("/etc", [], False),
    ],
)
def test_is_deletable_path(path: str, bases: list[str], deletable: bool) -> None:
    assert is_deletable_path(path, bases) is deletable


def test_is_strictly_inside_compares_whole_components() -> None:
    assert is_strictly_inside("/a/b", "/a")
    assert not is_strictly_inside("/ab", "/a")
    assert not is_strictly_inside("/a", "/a")
    assert not is_strictly_inside("a/b", "/a")


def test_choose_base_path_prefers_fewest_live_volumes_then_name() -> None:
    assert choose_base_path(["/b", "/a"], {}) == "/a"
    assert choose_base_path(["/a", "/b"], {"/a": 3, "/b": 1}) == "/b"
    assert choose_base_path(["/c", "/b", "/a"], {"/a": 2, "/b": 1, "/c": 1}) == "/b"
    with pytest.raises(ValueError, match="no candidate"):
        choose_base_path([], {})


def test_a_folder_name_longer_than_file_systems_allow_is_refused_up_front() -> None:
    # A 253-character claim name makes the default folder longer than NAME_MAX (255 bytes):
    # refuse it before a helper fails on it 15 times.
    name = "c" * 253
    with pytest.raises(PathPatternError, match="bytes; file systems allow 255"):
        check_volume_path("/opt/lp", f"pvc-1_ns_{name}", None)
    assert check_volume_path("/opt/lp", "x" * 255, None) == "/opt/lp/" + "x" * 255


def test_a_path_longer_than_a_node_holds_is_refused_naming_the_annotation_that_made_it() -> None:
    """A claim annotation of many short components passed every component's check: a 200 KB
    path was decided, and its helper never started (VOL_DIR over execve's limit)."""
    pattern = '{{.PVC.Namespace}}/{{.PVC.Name}}/{{index .PVC.Annotations "dir"}}'
    long = PatternFields("pvc-1", "ns", "c", {}, {"dir": "/".join(["d" * 200] * 1000)})
    with pytest.raises(PathTooLong) as raised:
        resolve_volume_path("/opt/lp", pattern, long)
    message = str(raised.value)
    assert f"a node holds a volume path of at most {MAX_VOLUME_PATH_BYTES}" in message
    assert 'pathPattern renders the claim\'s annotation "dir" (200999 bytes)' in message
    assert "shorten that annotation, or change the StorageClass parameter pathPattern" in message
    assert MAX_VOLUME_PATH_BYTES < PATH_MAX - 1, "the helper's room is left"


def test_the_longest_path_a_node_holds_is_decided_and_one_byte_more_is_not() -> None:
    base, prefix = "/opt/lp", "ns/c/"
    fill = MAX_VOLUME_PATH_BYTES - len(base) - 1 - len(prefix)
    folders = ("e" * 200 + "/") * (fill // 201) + "f" * (fill % 201)
    fields = PatternFields("pvc-1", "ns", "c", {"sub": "x"}, {"dir": folders})
    pattern = "{{.PVC.Namespace}}/{{.PVC.Name}}/{{.PVC.Annotations.dir}}"
    assert len(resolve_volume_path(base, pattern, fields)) == MAX_VOLUME_PATH_BYTES
    with pytest.raises(PathTooLong, match='annotation "dir"'):
        resolve_volume_path(base, pattern + "g", fields)


def test_a_component_too_long_names_the_label_that_made_it() -> None:
    fields = PatternFields("pvc-1", "ns", "c", {"tier": "t" * 256}, {})
    with pytest.raises(PathTooLong, match='label "tier" \\(256 bytes\\)'):
        resolve_volume_path(
            "/opt/lp", "{{.PVC.Namespace}}/{{.PVC.Name}}/{{.PVC.Labels.tier}}", fields
        )
