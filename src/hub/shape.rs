//! shape — turns MCP wire types into what Python sees: tool descriptions and call results.
//!
//! Pure functions, so the rules for what a script receives are tested without any server.

use crate::bridge::{ToolCallError, ToolSpec};
use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::{json, Value};

/// The value a script receives from a tool call.
///
/// - `structuredContent` when present (it is the tool's typed answer);
/// - else one text block: parsed as JSON if it is JSON, else the text itself;
/// - else a list with one entry per block (text → str, image/audio → dict with `type`,
///   `mimeType`, `data`, resources → the block as a dict).
///
/// `isError: true` becomes an error carrying the result's text, which is what the tool wrote for a
/// human (or model) to read.
pub fn shape_result(result: &CallToolResult) -> Result<Value, ToolCallError> {
    if result.is_error == Some(true) {
        return Err(ToolCallError::Tool(error_text(result)));
    }
    if let Some(structured) = &result.structured_content {
        return Ok(structured.clone());
    }
    if let [ContentBlock::Text(text)] = result.content.as_slice() {
        return Ok(
            serde_json::from_str(&text.text).unwrap_or_else(|_| Value::String(text.text.clone()))
        );
    }
    Ok(Value::Array(
        result.content.iter().map(block_value).collect(),
    ))
}

fn block_value(block: &ContentBlock) -> Value {
    match block {
        ContentBlock::Text(text) => Value::String(text.text.clone()),
        ContentBlock::Image(image) => {
            json!({"type": "image", "mimeType": image.mime_type, "data": image.data})
        }
        ContentBlock::Audio(audio) => {
            json!({"type": "audio", "mimeType": audio.mime_type, "data": audio.data})
        }
        // Resources (embedded or linked) and any later kinds: the block as the server sent it.
        other => serde_json::to_value(other).unwrap_or_else(|e| {
            json!({"type": "unknown", "error": format!("cannot represent this content block: {e}")})
        }),
    }
}

fn error_text(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    match &result.structured_content {
        Some(value) => value.to_string(),
        None => "the tool reported an error without a message".to_owned(),
    }
}

/// Longest tool description kept; the rest is cut with a note (a server's text reaches the model).
const MAX_DESCRIPTION: usize = 4096;

/// A server's tool list as the bridge describes it to Python: each tool's Python name unique.
pub fn tool_specs(tools: &[Tool]) -> Vec<ToolSpec> {
    let mut specs: Vec<ToolSpec> = tools.iter().map(tool_spec).collect();
    crate::bridge::signature::assign_python_names(&mut specs);
    specs
}

/// One rmcp tool as the bridge describes it to Python.
pub fn tool_spec(tool: &Tool) -> ToolSpec {
    let description = tool
        .description
        .as_deref()
        .or(tool.title.as_deref())
        .unwrap_or_default();
    let mut description = printable(description, true);
    if description.len() > MAX_DESCRIPTION {
        let end = description.floor_char_boundary(MAX_DESCRIPTION);
        let total = description.len();
        description.truncate(end);
        description.push_str(&format!("… [description cut at {end} of {total} bytes]"));
    }
    ToolSpec {
        name: tool.name.to_string(),
        python_name: String::new(),
        description,
        input_schema: Value::Object(tool.input_schema.as_ref().clone()),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|schema| Value::Object(schema.as_ref().clone())),
        annotations: tool
            .annotations
            .as_ref()
            .and_then(|a| serde_json::to_value(a).ok()),
    }
}

/// `text` without terminal control: ANSI escape sequences and control characters are dropped
/// (newlines and tabs kept when `multiline`, else each becomes a space).
pub fn printable(text: &str, multiline: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI (`ESC [ ... final`) or OSC (`ESC ] ... BEL|ESC \\`); else just the ESC.
                match chars.peek() {
                    Some('[') => {
                        chars.next();
                        for c in chars.by_ref() {
                            if ('\u{40}'..='\u{7e}').contains(&c) {
                                break;
                            }
                        }
                    }
                    Some(']') => {
                        while let Some(c) = chars.next() {
                            if c == '\u{7}' || c == '\u{9c}' {
                                break;
                            }
                            if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                                chars.next();
                                break;
                            }
                        }
                    }
                    _ => {}
                }
            }
            '\r' => {}
            '\n' | '\t' if multiline => out.push(c),
            '\n' | '\t' => out.push(' '),
            c if c.is_control() => {}
            // Bidirectional overrides can make text read differently from what it is.
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).expect("a valid CallToolResult")
    }

    #[test]
    fn control_characters_never_reach_the_model() {
        assert_eq!(
            printable(
                "\u{1b}[31mred\u{1b}[0m ok\u{7}\u{1b}]0;title\u{7}!\nnext\r",
                true
            ),
            "red ok!\nnext"
        );
        assert_eq!(printable("a\nb\u{202e}c", false), "a bc");
    }

    #[test]
    fn structured_content_wins() {
        let r = result(json!({
            "content": [{"type": "text", "text": "{\"t\": 1}"}],
            "structuredContent": {"t": 1, "unit": "C"}
        }));
        assert_eq!(shape_result(&r), Ok(json!({"t": 1, "unit": "C"})));
    }

    #[test]
    fn structured_null_is_kept() {
        let r = result(json!({"content": [], "structuredContent": null}));
        assert_eq!(shape_result(&r), Ok(Value::Null));
    }

    #[test]
    fn one_text_block_that_is_json_is_parsed() {
        let r = result(json!({"content": [{"type": "text", "text": "[1, {\"a\": true}]"}]}));
        assert_eq!(shape_result(&r), Ok(json!([1, {"a": true}])));
    }

    #[test]
    fn one_text_block_that_is_not_json_stays_text() {
        let r = result(json!({"content": [{"type": "text", "text": "The sum is 3."}]}));
        assert_eq!(shape_result(&r), Ok(json!("The sum is 3.")));
    }

    #[test]
    fn several_blocks_become_a_list() {
        let r = result(json!({"content": [
            {"type": "text", "text": "a picture:"},
            {"type": "image", "mimeType": "image/png", "data": "iVBOR", "annotations": {"priority": 1}},
            {"type": "audio", "mimeType": "audio/wav", "data": "UklGR"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "hi"}},
            {"type": "resource_link", "uri": "file:///b.txt", "name": "b.txt"}
        ]}));
        let shaped = shape_result(&r).expect("ok");
        assert_eq!(shaped[0], json!("a picture:"));
        assert_eq!(
            shaped[1],
            json!({"type": "image", "mimeType": "image/png", "data": "iVBOR"})
        );
        assert_eq!(
            shaped[2],
            json!({"type": "audio", "mimeType": "audio/wav", "data": "UklGR"})
        );
        assert_eq!(shaped[3]["type"], "resource");
        assert_eq!(shaped[3]["resource"]["text"], "hi");
        assert_eq!(shaped[4]["type"], "resource_link");
        assert_eq!(shaped[4]["uri"], "file:///b.txt");
    }

    #[test]
    fn a_single_image_is_a_list_of_one() {
        let r =
            result(json!({"content": [{"type": "image", "mimeType": "image/png", "data": "x"}]}));
        assert_eq!(
            shape_result(&r),
            Ok(json!([{"type": "image", "mimeType": "image/png", "data": "x"}]))
        );
    }

    #[test]
    fn no_content_is_an_empty_list() {
        let r = result(json!({"content": []}));
        assert_eq!(shape_result(&r), Ok(json!([])));
    }

    #[test]
    fn is_error_carries_the_text() {
        let r = result(json!({
            "content": [{"type": "text", "text": "ENOENT: no such file"}, {"type": "text", "text": "(read_text_file)"}],
            "isError": true
        }));
        assert_eq!(
            shape_result(&r),
            Err(ToolCallError::Tool(
                "ENOENT: no such file\n(read_text_file)".to_owned()
            ))
        );
        let r = result(json!({"content": [], "isError": true}));
        assert_eq!(
            shape_result(&r),
            Err(ToolCallError::Tool(
                "the tool reported an error without a message".to_owned()
            ))
        );
    }

    #[test]
    fn tool_spec_keeps_schemas_and_annotations() {
        let tool: Tool = serde_json::from_value(json!({
            "name": "read_text_file",
            "title": "Read",
            "description": "Reads a file",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "outputSchema": {"type": "object", "properties": {"content": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}
        }))
        .expect("a valid Tool");
        let spec = tool_spec(&tool);
        assert_eq!(spec.name, "read_text_file");
        assert_eq!(spec.description, "Reads a file");
        assert_eq!(spec.input_schema["properties"]["path"]["type"], "string");
        assert_eq!(
            spec.output_schema.as_ref().map(|s| s["type"].clone()),
            Some(json!("object"))
        );
        assert_eq!(spec.annotations, Some(json!({"readOnlyHint": true})));

        let bare: Tool =
            serde_json::from_value(json!({"name": "t", "inputSchema": {"type": "object"}}))
                .expect("a valid Tool");
        let spec = tool_spec(&bare);
        assert_eq!(spec.description, "");
        assert_eq!(spec.output_schema, None);
        assert_eq!(spec.annotations, None);
    }
}
