import datetime

from google.protobuf import any_pb2 as _any_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AttributeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTRIBUTE_TYPE_UNSPECIFIED: _ClassVar[AttributeType]
    ATTRIBUTE_TYPE_BOOLEAN: _ClassVar[AttributeType]
    ATTRIBUTE_TYPE_BOOLEAN_ARRAY: _ClassVar[AttributeType]
    ATTRIBUTE_TYPE_STRING: _ClassVar[AttributeType]
    ATTRIBUTE_TYPE_STRING_ARRAY: _ClassVar[AttributeType]
    ATTRIBUTE_TYPE_INTEGER: _ClassVar[AttributeType]
    ATTRIBUTE_TYPE_INTEGER_ARRAY: _ClassVar[AttributeType]
    ATTRIBUTE_TYPE_DOUBLE: _ClassVar[AttributeType]
    ATTRIBUTE_TYPE_DOUBLE_ARRAY: _ClassVar[AttributeType]
ATTRIBUTE_TYPE_UNSPECIFIED: AttributeType
ATTRIBUTE_TYPE_BOOLEAN: AttributeType
ATTRIBUTE_TYPE_BOOLEAN_ARRAY: AttributeType
ATTRIBUTE_TYPE_STRING: AttributeType
ATTRIBUTE_TYPE_STRING_ARRAY: AttributeType
ATTRIBUTE_TYPE_INTEGER: AttributeType
ATTRIBUTE_TYPE_INTEGER_ARRAY: AttributeType
ATTRIBUTE_TYPE_DOUBLE: AttributeType
ATTRIBUTE_TYPE_DOUBLE_ARRAY: AttributeType

class WatchRequest(_message.Message):
    __slots__ = ("tenant_id", "snap_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SNAP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    snap_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., snap_token: _Optional[str] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("changes",)
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: DataChanges
    def __init__(self, changes: _Optional[_Union[DataChanges, _Mapping]] = ...) -> None: ...

class DataChanges(_message.Message):
    __slots__ = ("snap_token", "data_changes")
    SNAP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DATA_CHANGES_FIELD_NUMBER: _ClassVar[int]
    snap_token: str
    data_changes: _containers.RepeatedCompositeFieldContainer[DataChange]
    def __init__(self, snap_token: _Optional[str] = ..., data_changes: _Optional[_Iterable[_Union[DataChange, _Mapping]]] = ...) -> None: ...

class DataChange(_message.Message):
    __slots__ = ("operation", "tuple", "attribute")
    class Operation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OPERATION_UNSPECIFIED: _ClassVar[DataChange.Operation]
        OPERATION_CREATE: _ClassVar[DataChange.Operation]
        OPERATION_DELETE: _ClassVar[DataChange.Operation]
    OPERATION_UNSPECIFIED: DataChange.Operation
    OPERATION_CREATE: DataChange.Operation
    OPERATION_DELETE: DataChange.Operation
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    TUPLE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTE_FIELD_NUMBER: _ClassVar[int]
    operation: DataChange.Operation
    tuple: Tuple
    attribute: Attribute
    def __init__(self, operation: _Optional[_Union[DataChange.Operation, str]] = ..., tuple: _Optional[_Union[Tuple, _Mapping]] = ..., attribute: _Optional[_Union[Attribute, _Mapping]] = ...) -> None: ...

class Entity(_message.Message):
    __slots__ = ("type", "id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class Subject(_message.Message):
    __slots__ = ("type", "id", "relation")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    relation: str
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ..., relation: _Optional[str] = ...) -> None: ...

class Tuple(_message.Message):
    __slots__ = ("entity", "relation", "subject")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    entity: Entity
    relation: str
    subject: Subject
    def __init__(self, entity: _Optional[_Union[Entity, _Mapping]] = ..., relation: _Optional[str] = ..., subject: _Optional[_Union[Subject, _Mapping]] = ...) -> None: ...

class Attribute(_message.Message):
    __slots__ = ("entity", "attribute", "value")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    entity: Entity
    attribute: str
    value: _any_pb2.Any
    def __init__(self, entity: _Optional[_Union[Entity, _Mapping]] = ..., attribute: _Optional[str] = ..., value: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...

class EntityFilter(_message.Message):
    __slots__ = ("type", "ids")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    type: str
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, type: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ...) -> None: ...

class SubjectFilter(_message.Message):
    __slots__ = ("type", "ids", "relation")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    type: str
    ids: _containers.RepeatedScalarFieldContainer[str]
    relation: str
    def __init__(self, type: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ..., relation: _Optional[str] = ...) -> None: ...

class TupleFilter(_message.Message):
    __slots__ = ("entity", "relation", "subject")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    entity: EntityFilter
    relation: str
    subject: SubjectFilter
    def __init__(self, entity: _Optional[_Union[EntityFilter, _Mapping]] = ..., relation: _Optional[str] = ..., subject: _Optional[_Union[SubjectFilter, _Mapping]] = ...) -> None: ...

class AttributeFilter(_message.Message):
    __slots__ = ("entity", "attributes")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    entity: EntityFilter
    attributes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, entity: _Optional[_Union[EntityFilter, _Mapping]] = ..., attributes: _Optional[_Iterable[str]] = ...) -> None: ...

class StringValue(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: str
    def __init__(self, data: _Optional[str] = ...) -> None: ...

class IntegerValue(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: int
    def __init__(self, data: _Optional[int] = ...) -> None: ...

class DoubleValue(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: float
    def __init__(self, data: _Optional[float] = ...) -> None: ...

class BooleanValue(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bool
    def __init__(self, data: _Optional[bool] = ...) -> None: ...

class StringArrayValue(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, data: _Optional[_Iterable[str]] = ...) -> None: ...

class IntegerArrayValue(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, data: _Optional[_Iterable[int]] = ...) -> None: ...

class DoubleArrayValue(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, data: _Optional[_Iterable[float]] = ...) -> None: ...

class BooleanArrayValue(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, data: _Optional[_Iterable[bool]] = ...) -> None: ...

class SchemaDefinition(_message.Message):
    __slots__ = ("entity_definitions", "rule_definitions", "references")
    class Reference(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REFERENCE_UNSPECIFIED: _ClassVar[SchemaDefinition.Reference]
        REFERENCE_ENTITY: _ClassVar[SchemaDefinition.Reference]
        REFERENCE_RULE: _ClassVar[SchemaDefinition.Reference]
    REFERENCE_UNSPECIFIED: SchemaDefinition.Reference
    REFERENCE_ENTITY: SchemaDefinition.Reference
    REFERENCE_RULE: SchemaDefinition.Reference
    class EntityDefinitionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: EntityDefinition
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[EntityDefinition, _Mapping]] = ...) -> None: ...
    class RuleDefinitionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RuleDefinition
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RuleDefinition, _Mapping]] = ...) -> None: ...
    class ReferencesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: SchemaDefinition.Reference
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[SchemaDefinition.Reference, str]] = ...) -> None: ...
    ENTITY_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    RULE_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    entity_definitions: _containers.MessageMap[str, EntityDefinition]
    rule_definitions: _containers.MessageMap[str, RuleDefinition]
    references: _containers.ScalarMap[str, SchemaDefinition.Reference]
    def __init__(self, entity_definitions: _Optional[_Mapping[str, EntityDefinition]] = ..., rule_definitions: _Optional[_Mapping[str, RuleDefinition]] = ..., references: _Optional[_Mapping[str, SchemaDefinition.Reference]] = ...) -> None: ...

class EntityDefinition(_message.Message):
    __slots__ = ("name", "relations", "permissions", "attributes", "references")
    class Reference(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REFERENCE_UNSPECIFIED: _ClassVar[EntityDefinition.Reference]
        REFERENCE_RELATION: _ClassVar[EntityDefinition.Reference]
        REFERENCE_PERMISSION: _ClassVar[EntityDefinition.Reference]
        REFERENCE_ATTRIBUTE: _ClassVar[EntityDefinition.Reference]
    REFERENCE_UNSPECIFIED: EntityDefinition.Reference
    REFERENCE_RELATION: EntityDefinition.Reference
    REFERENCE_PERMISSION: EntityDefinition.Reference
    REFERENCE_ATTRIBUTE: EntityDefinition.Reference
    class RelationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RelationDefinition
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RelationDefinition, _Mapping]] = ...) -> None: ...
    class PermissionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: PermissionDefinition
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[PermissionDefinition, _Mapping]] = ...) -> None: ...
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttributeDefinition
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttributeDefinition, _Mapping]] = ...) -> None: ...
    class ReferencesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: EntityDefinition.Reference
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[EntityDefinition.Reference, str]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    relations: _containers.MessageMap[str, RelationDefinition]
    permissions: _containers.MessageMap[str, PermissionDefinition]
    attributes: _containers.MessageMap[str, AttributeDefinition]
    references: _containers.ScalarMap[str, EntityDefinition.Reference]
    def __init__(self, name: _Optional[str] = ..., relations: _Optional[_Mapping[str, RelationDefinition]] = ..., permissions: _Optional[_Mapping[str, PermissionDefinition]] = ..., attributes: _Optional[_Mapping[str, AttributeDefinition]] = ..., references: _Optional[_Mapping[str, EntityDefinition.Reference]] = ...) -> None: ...

class RuleDefinition(_message.Message):
    __slots__ = ("name", "arguments")
    class ArgumentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttributeType
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttributeType, str]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    arguments: _containers.ScalarMap[str, AttributeType]
    def __init__(self, name: _Optional[str] = ..., arguments: _Optional[_Mapping[str, AttributeType]] = ...) -> None: ...

class AttributeDefinition(_message.Message):
    __slots__ = ("name", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: AttributeType
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[AttributeType, str]] = ...) -> None: ...

class RelationDefinition(_message.Message):
    __slots__ = ("name", "relation_references")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RELATION_REFERENCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    relation_references: _containers.RepeatedCompositeFieldContainer[RelationReference]
    def __init__(self, name: _Optional[str] = ..., relation_references: _Optional[_Iterable[_Union[RelationReference, _Mapping]]] = ...) -> None: ...

class PermissionDefinition(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RelationReference(_message.Message):
    __slots__ = ("type", "relation")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    type: str
    relation: str
    def __init__(self, type: _Optional[str] = ..., relation: _Optional[str] = ...) -> None: ...

class SchemaWriteRequest(_message.Message):
    __slots__ = ("tenant_id", "schema")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    schema: str
    def __init__(self, tenant_id: _Optional[str] = ..., schema: _Optional[str] = ...) -> None: ...

class SchemaWriteResponse(_message.Message):
    __slots__ = ("schema_version",)
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    schema_version: str
    def __init__(self, schema_version: _Optional[str] = ...) -> None: ...

class SchemaReadRequest(_message.Message):
    __slots__ = ("tenant_id", "metadata")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    metadata: SchemaReadRequestMetadata
    def __init__(self, tenant_id: _Optional[str] = ..., metadata: _Optional[_Union[SchemaReadRequestMetadata, _Mapping]] = ...) -> None: ...

class SchemaReadRequestMetadata(_message.Message):
    __slots__ = ("schema_version",)
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    schema_version: str
    def __init__(self, schema_version: _Optional[str] = ...) -> None: ...

class SchemaReadResponse(_message.Message):
    __slots__ = ("schema",)
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    schema: SchemaDefinition
    def __init__(self, schema: _Optional[_Union[SchemaDefinition, _Mapping]] = ...) -> None: ...

class SchemaListRequest(_message.Message):
    __slots__ = ("tenant_id", "page_size", "continuous_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    page_size: int
    continuous_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., page_size: _Optional[int] = ..., continuous_token: _Optional[str] = ...) -> None: ...

class SchemaListResponse(_message.Message):
    __slots__ = ("head", "schemas", "continuous_token")
    HEAD_FIELD_NUMBER: _ClassVar[int]
    SCHEMAS_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    head: str
    schemas: _containers.RepeatedCompositeFieldContainer[SchemaList]
    continuous_token: str
    def __init__(self, head: _Optional[str] = ..., schemas: _Optional[_Iterable[_Union[SchemaList, _Mapping]]] = ..., continuous_token: _Optional[str] = ...) -> None: ...

class SchemaList(_message.Message):
    __slots__ = ("version", "created_at")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    version: str
    created_at: str
    def __init__(self, version: _Optional[str] = ..., created_at: _Optional[str] = ...) -> None: ...

class DataWriteRequest(_message.Message):
    __slots__ = ("tenant_id", "metadata", "tuples", "attributes")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TUPLES_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    metadata: DataWriteRequestMetadata
    tuples: _containers.RepeatedCompositeFieldContainer[Tuple]
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    def __init__(self, tenant_id: _Optional[str] = ..., metadata: _Optional[_Union[DataWriteRequestMetadata, _Mapping]] = ..., tuples: _Optional[_Iterable[_Union[Tuple, _Mapping]]] = ..., attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ...) -> None: ...

class DataWriteRequestMetadata(_message.Message):
    __slots__ = ("schema_version",)
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    schema_version: str
    def __init__(self, schema_version: _Optional[str] = ...) -> None: ...

class DataWriteResponse(_message.Message):
    __slots__ = ("snap_token",)
    SNAP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    snap_token: str
    def __init__(self, snap_token: _Optional[str] = ...) -> None: ...

class RelationshipWriteRequest(_message.Message):
    __slots__ = ("tenant_id", "metadata", "tuples")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TUPLES_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    metadata: RelationshipWriteRequestMetadata
    tuples: _containers.RepeatedCompositeFieldContainer[Tuple]
    def __init__(self, tenant_id: _Optional[str] = ..., metadata: _Optional[_Union[RelationshipWriteRequestMetadata, _Mapping]] = ..., tuples: _Optional[_Iterable[_Union[Tuple, _Mapping]]] = ...) -> None: ...

class RelationshipWriteRequestMetadata(_message.Message):
    __slots__ = ("schema_version",)
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    schema_version: str
    def __init__(self, schema_version: _Optional[str] = ...) -> None: ...

class RelationshipWriteResponse(_message.Message):
    __slots__ = ("snap_token",)
    SNAP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    snap_token: str
    def __init__(self, snap_token: _Optional[str] = ...) -> None: ...

class RelationshipReadRequest(_message.Message):
    __slots__ = ("tenant_id", "metadata", "filter", "page_size", "continuous_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    metadata: RelationshipReadRequestMetadata
    filter: TupleFilter
    page_size: int
    continuous_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., metadata: _Optional[_Union[RelationshipReadRequestMetadata, _Mapping]] = ..., filter: _Optional[_Union[TupleFilter, _Mapping]] = ..., page_size: _Optional[int] = ..., continuous_token: _Optional[str] = ...) -> None: ...

class RelationshipReadRequestMetadata(_message.Message):
    __slots__ = ("snap_token",)
    SNAP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    snap_token: str
    def __init__(self, snap_token: _Optional[str] = ...) -> None: ...

class RelationshipReadResponse(_message.Message):
    __slots__ = ("tuples", "continuous_token")
    TUPLES_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tuples: _containers.RepeatedCompositeFieldContainer[Tuple]
    continuous_token: str
    def __init__(self, tuples: _Optional[_Iterable[_Union[Tuple, _Mapping]]] = ..., continuous_token: _Optional[str] = ...) -> None: ...

class AttributeReadRequest(_message.Message):
    __slots__ = ("tenant_id", "metadata", "filter", "page_size", "continuous_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    metadata: AttributeReadRequestMetadata
    filter: AttributeFilter
    page_size: int
    continuous_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., metadata: _Optional[_Union[AttributeReadRequestMetadata, _Mapping]] = ..., filter: _Optional[_Union[AttributeFilter, _Mapping]] = ..., page_size: _Optional[int] = ..., continuous_token: _Optional[str] = ...) -> None: ...

class AttributeReadRequestMetadata(_message.Message):
    __slots__ = ("snap_token",)
    SNAP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    snap_token: str
    def __init__(self, snap_token: _Optional[str] = ...) -> None: ...

class AttributeReadResponse(_message.Message):
    __slots__ = ("attributes", "continuous_token")
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    continuous_token: str
    def __init__(self, attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ..., continuous_token: _Optional[str] = ...) -> None: ...

class DataDeleteRequest(_message.Message):
    __slots__ = ("tenant_id", "tuple_filter", "attribute_filter")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    TUPLE_FILTER_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTE_FILTER_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    tuple_filter: TupleFilter
    attribute_filter: AttributeFilter
    def __init__(self, tenant_id: _Optional[str] = ..., tuple_filter: _Optional[_Union[TupleFilter, _Mapping]] = ..., attribute_filter: _Optional[_Union[AttributeFilter, _Mapping]] = ...) -> None: ...

class DataDeleteResponse(_message.Message):
    __slots__ = ("snap_token",)
    SNAP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    snap_token: str
    def __init__(self, snap_token: _Optional[str] = ...) -> None: ...

class RelationshipDeleteRequest(_message.Message):
    __slots__ = ("tenant_id", "filter")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    filter: TupleFilter
    def __init__(self, tenant_id: _Optional[str] = ..., filter: _Optional[_Union[TupleFilter, _Mapping]] = ...) -> None: ...

class RelationshipDeleteResponse(_message.Message):
    __slots__ = ("snap_token",)
    SNAP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    snap_token: str
    def __init__(self, snap_token: _Optional[str] = ...) -> None: ...

class Tenant(_message.Message):
    __slots__ = ("id", "name", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TenantCreateRequest(_message.Message):
    __slots__ = ("id", "name")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class TenantCreateResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class TenantDeleteRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class TenantDeleteResponse(_message.Message):
    __slots__ = ("tenant_id",)
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    def __init__(self, tenant_id: _Optional[str] = ...) -> None: ...

class TenantListRequest(_message.Message):
    __slots__ = ("page_size", "continuous_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    continuous_token: str
    def __init__(self, page_size: _Optional[int] = ..., continuous_token: _Optional[str] = ...) -> None: ...

class TenantListResponse(_message.Message):
    __slots__ = ("tenants", "continuous_token")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[Tenant]
    continuous_token: str
    def __init__(self, tenants: _Optional[_Iterable[_Union[Tenant, _Mapping]]] = ..., continuous_token: _Optional[str] = ...) -> None: ...
