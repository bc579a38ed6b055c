//! The XML Azure answers with: `List Blobs` pages and error documents.

use chrono::{DateTime, Utc};
use quick_xml::Reader;
use quick_xml::events::Event;

use crate::object::ObjectInfo;

pub(super) struct Page {
    pub blobs: Vec<ObjectInfo>,
    pub next_marker: Option<String>,
}

/// Reads a `List Blobs` answer: each `Blob`'s name and properties, and `NextMarker`.
pub(super) fn parse(xml: &[u8]) -> Result<Page, String> {
    let mut reader = Reader::from_reader(xml);
    let mut path: Vec<String> = Vec::new();
    let mut page = Page {
        blobs: Vec::new(),
        next_marker: None,
    };
    let mut blob: Option<ObjectInfo> = None;
    // The text of the element being read: quick-xml hands it over in pieces (text, then each
    // entity reference such as `&amp;` on its own), so it is gathered until the element ends.
    let mut text = String::new();
    let mut buf = Vec::new();
    loop {
        match reader
            .read_event_into(&mut buf)
            .map_err(|e| e.to_string())?
        {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if name == "Blob" {
                    blob = Some(ObjectInfo {
                        key: String::new(),
                        size: 0,
                        last_modified: None,
                        etag: None,
                        metadata: Default::default(),
                    });
                }
                path.push(name);
                text.clear();
            }
            Event::End(_) => {
                set_field(&path, std::mem::take(&mut text), &mut blob, &mut page);
                if path.pop().as_deref() == Some("Blob")
                    && let Some(b) = blob.take()
                {
                    page.blobs.push(b);
                }
            }
            Event::Empty(_) => text.clear(),
            Event::Text(t) => text.push_str(&t.decode().map_err(|e| e.to_string())?),
            Event::CData(t) => text.push_str(&String::from_utf8_lossy(&t)),
            Event::GeneralRef(r) => text.push_str(&resolve_reference(&r)?),
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    Ok(page)
}

/// The character an entity or character reference (`amp`, `#38`, `#x26`) stands for.
fn resolve_reference(reference: &quick_xml::events::BytesRef) -> Result<String, String> {
    let name = reference.decode().map_err(|e| e.to_string())?;
    if let Some(c) = reference.resolve_char_ref().map_err(|e| e.to_string())? {
        return Ok(c.to_string());
    }
    quick_xml::escape::resolve_predefined_entity(&name)
        .map(str::to_string)
        .ok_or_else(|| format!("unknown entity &{name};"))
}

fn set_field(path: &[String], text: String, blob: &mut Option<ObjectInfo>, page: &mut Page) {
    let last = path.last().map(String::as_str);
    if last == Some("NextMarker") && path.len() == 2 {
        page.next_marker = Some(text).filter(|t| !t.is_empty());
        return;
    }
    let Some(b) = blob.as_mut() else { return };
    match last {
        Some("Name") if path.len() == 4 => b.key = text,
        Some("Content-Length") => b.size = text.trim().parse().unwrap_or(0),
        Some("Last-Modified") => {
            b.last_modified = DateTime::parse_from_rfc2822(text.trim())
                .ok()
                .map(|t| t.with_timezone(&Utc))
        }
        // The listing gives the ETag bare (`0x8D...`), the blob's headers quoted (`"0x8D..."`):
        // one form, the headers', so that an ETag recorded at upload (a manifest's) matches the
        // listed one, and If-Match gets what the service sent.
        Some("Etag") => b.etag = Some(quoted_etag(text.trim())),
        _ => {}
    }
}

/// `etag` in quotes, as the service's `ETag` headers carry it.
fn quoted_etag(etag: &str) -> String {
    if etag.starts_with('"') {
        etag.to_string()
    } else {
        format!("\"{etag}\"")
    }
}

/// The names of the blocks in a `Get Block List` answer, in order.
pub(super) fn block_names(xml: &[u8]) -> Result<Vec<String>, String> {
    let mut reader = Reader::from_reader(xml);
    let mut path: Vec<String> = Vec::new();
    let mut names = Vec::new();
    let mut text = String::new();
    let mut buf = Vec::new();
    loop {
        match reader
            .read_event_into(&mut buf)
            .map_err(|e| e.to_string())?
        {
            Event::Start(e) => {
                path.push(String::from_utf8_lossy(e.name().as_ref()).into_owned());
                text.clear();
            }
            Event::Text(t) => text.push_str(&t.decode().map_err(|e| e.to_string())?),
            Event::GeneralRef(r) => text.push_str(&resolve_reference(&r)?),
            Event::End(_) => {
                let at_name = path.len() >= 2
                    && path[path.len() - 1] == "Name"
                    && path[path.len() - 2] == "Block";
                if at_name {
                    names.push(std::mem::take(&mut text));
                }
                path.pop();
            }
            Event::Eof => return Ok(names),
            _ => {}
        }
        buf.clear();
    }
}

/// The text of the first element named `tag` (an error document's `Code` or `Message`).
pub(super) fn element_text(xml: &[u8], tag: &str) -> Option<String> {
    let mut reader = Reader::from_reader(xml);
    let mut inside = false;
    let mut text = String::new();
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf).ok()? {
            Event::Start(e) if e.name().as_ref() == tag.as_bytes() => inside = true,
            Event::Text(t) if inside => text.push_str(&t.decode().ok()?),
            Event::GeneralRef(r) if inside => text.push_str(&resolve_reference(&r).ok()?),
            Event::End(_) if inside => return Some(text),
            Event::Eof => return None,
            _ => {}
        }
        buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_page_gives_names_sizes_and_the_next_marker() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?>
<EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/acct" ContainerName="c">
  <Prefix>etcd/</Prefix>
  <Blobs>
    <Blob><Name>etcd/a&amp;b</Name><Properties><Last-Modified>Sun, 29 Nov 2026 14:00:00 GMT</Last-Modified><Etag>0x8D1</Etag><Content-Length>42</Content-Length></Properties><Metadata/></Blob>
    <Blob><Name>etcd/c</Name><Properties><Content-Length>7</Content-Length></Properties></Blob>
  </Blobs>
  <NextMarker>2!72!token</NextMarker>
</EnumerationResults>"#;
        let page = parse(xml).unwrap();
        assert_eq!(page.blobs.len(), 2);
        assert_eq!(page.blobs[0].key, "etcd/a&b");
        assert_eq!(page.blobs[0].size, 42);
        // Quoted, as the blob's own headers give it.
        assert_eq!(page.blobs[0].etag.as_deref(), Some("\"0x8D1\""));
        assert!(page.blobs[0].last_modified.is_some());
        assert_eq!(page.blobs[1].key, "etcd/c");
        assert_eq!(page.next_marker.as_deref(), Some("2!72!token"));
    }

    #[test]
    fn the_last_page_has_no_marker() {
        let xml = br#"<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>"#;
        let page = parse(xml).unwrap();
        assert!(page.blobs.is_empty());
        assert_eq!(page.next_marker, None);
    }

    #[test]
    fn a_block_list_gives_its_names_in_order() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><BlockList><CommittedBlocks><Block><Name>QQ==</Name><Size>8</Size></Block><Block><Name>Qg==</Name><Size>3</Size></Block></CommittedBlocks><UncommittedBlocks/></BlockList>"#;
        assert_eq!(block_names(xml).unwrap(), ["QQ==", "Qg=="]);
    }

    #[test]
    fn error_documents_give_their_code() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><Error><Code>ContainerNotFound</Code><Message>The specified container does not exist.
RequestId:1</Message></Error>"#;
        assert_eq!(
            element_text(xml, "Code").as_deref(),
            Some("ContainerNotFound")
        );
    }
}
