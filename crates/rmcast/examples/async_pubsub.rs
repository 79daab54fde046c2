//! An async (tokio) sender and receiver: two nodes in one process, one publishing ten
//! messages, the other receiving them, each on its own task.
//!
//! ```sh
//! cargo run --example async_pubsub
//! ```

use rmcast::{GroupConfig, GroupEvent, Node, NodeConfig, OpenMode};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), rmcast::Error> {
    let name = format!("async-pubsub-{}", std::process::id());
    let publisher = Node::new(NodeConfig::default())?;
    let subscriber = Node::new(NodeConfig::default())?;
    let mut pub_group = publisher
        .open_group_async(GroupConfig::new(&name).mode(OpenMode::Create))
        .await?;
    let mut sub_group = subscriber
        .open_group_async(GroupConfig::new(&name).mode(OpenMode::Join))
        .await?;

    let receiver = tokio::spawn(async move {
        let mut got = 0;
        while let Some(ev) = sub_group.recv_async().await {
            if let GroupEvent::Deliver(d) = ev {
                println!("received: {}", String::from_utf8_lossy(&d.payload));
                got += 1;
                if got == 10 {
                    break;
                }
            }
        }
        sub_group.leave_async().await.map(|()| got)
    });

    // Wait until the subscriber is in the publisher's view, so that it gets every message.
    while let Some(ev) = pub_group.recv_async().await {
        if matches!(&ev, GroupEvent::View(v) if v.members.len() == 2) {
            break;
        }
    }
    for i in 0..10 {
        // Returns once the group holds the message.
        pub_group.send_async(format!("message {i}")).await?;
    }
    let got = receiver.await.expect("receiver task")?;
    pub_group.leave_async().await?;
    println!("the subscriber received {got} of 10 messages");
    Ok(())
}
